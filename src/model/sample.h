// Text generation with a model's own forward path (embed, blocks, logits; no tape, dropout off):
// the context is cropped to the model's block size, and each new token is drawn from the last
// position's logits with temperature and top-k (temperature 0: argmax). `remat sample` and
// Trainer::sample use it.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "model/model.h"

namespace remat {

struct SampleOptions {
  int64_t tokens = 0;        // new tokens to generate (>= 0)
  double temperature = 1.0;  // >= 0; 0 = greedy (argmax)
  int64_t top_k = 0;         // 0 = the whole vocabulary; else 1 .. V
  uint64_t seed = 0;         // the draws are a pure function of the seed (same seed, same output)
  // > 0: draw only among the first `vocab` ids (a tokenizer's, for an embedding padded beyond it, as
  // llm.c pads GPT-2's 50,257 to 50,304); 0: every id of the model.
  int64_t vocab = 0;
  // Polled before each token: non-zero ends the generation there, with the tokens drawn so far.
  const std::atomic<int>* stop = nullptr;
};

// Throws remat::Error("sample") naming the flag (--temperature, --top-k, --tokens) for a temperature
// below 0 or not finite, a top-k below 0 or above `V`, or a negative token count.
void check_sample_options(const SampleOptions& o, int64_t V);

// The V logits of the token after `context`: one forward over its last block-size tokens (all of it
// when shorter), no tape, dropout off. `context` must be non-empty with every id in [0, V).
std::vector<float> next_logits(const Model& model, std::span<const int32_t> context);

// One token from a row of logits. temperature 0: the argmax (the lowest id among ties). Otherwise
// softmax(logits / temperature) over the top_k largest logits (0: all; ties go to the lower id),
// drawn with one uniform double from `gen`. Throws remat::Error("sample") for a NaN or infinite logit.
int32_t pick_token(std::span<const float> logits, double temperature, int64_t top_k, std::mt19937_64& gen);

// The V logits of the token after `tokens`, fed at the cache's end (positions kv.len ..; the cache
// then holds them too): the blocks attend over the cache (kernels/attention_decode.h), and the head
// runs on the last position alone. No tape, dropout off.
std::vector<float> cached_logits(const Model& model, KVCache& kv, std::span<const int32_t> tokens);

// The bytes generate() allocates at its highest beside the model's weights, for a prompt of
// `prompt_len` tokens continued by `tokens`: the key/value cache and the largest forward, by a dry run
// of the same code (no memory, no kernels).
size_t generation_bytes(const Model& model, int64_t prompt_len, int64_t tokens);

// The prompt (non-empty, ids in [0, V)) continued by o.tokens tokens; returns only the new tokens.
// Each step sees the last block-size tokens of prompt + generated so far, through a key/value cache
// (cached_logits): one token's forward per new token while the context fits the block size, the
// window's forward once it slides (each position then changes). The same tokens as next_logits'
// forward over the whole window gives, up to the rounding of the attention's sums. `on_token` (if set) is
// called with each new token as it is drawn (to stream it). Throws remat::Error("sample") for an
// empty prompt, an id out of range, and options check_sample_options refuses.
std::vector<int32_t> generate(const Model& model, std::span<const int32_t> prompt, const SampleOptions& o,
                              const std::function<void(int32_t)>& on_token = {});

// A byte-level model: V <= 256, every token is one byte (text in, text out).
inline bool byte_level(const ModelConfig& c) { return c.V <= 256; }

// Bytes (tokens 0..255) as printable text, fed one token at a time (to stream): printable ASCII,
// '\n' and '\t' as they are, complete well-formed UTF-8 sequences as they are, and '?' for any other
// byte (control bytes, DEL, a stray or truncated UTF-8 byte), so the output is always valid UTF-8.
class ByteText {
 public:
  // The text this byte completes ("" while a UTF-8 sequence is still open).
  std::string push(int32_t byte);
  // The text of a sequence left open at the end ("?" or "").
  std::string finish();

 private:
  std::string pending_;
  int need_ = 0;  // continuation bytes still expected
};
// All of `tokens` through one ByteText.
std::string bytes_text(std::span<const int32_t> tokens);

}  // namespace remat
