// Token data for training: a uint16 token array in an accounted buffer (Category::Data), loaded
// from a text file (byte-level, V = 256), a nanoGPT / llm.c token file, or the built-in corpus;
// and a sampler that turns it into (inputs, targets) batches deterministically.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>

namespace remat::data {

class TokenDataset {
 public:
  TokenDataset() = default;
  ~TokenDataset();
  TokenDataset(TokenDataset&& o) noexcept;
  TokenDataset& operator=(TokenDataset&& o) noexcept;
  TokenDataset(const TokenDataset&) = delete;
  TokenDataset& operator=(const TokenDataset&) = delete;

  // Byte-level tokens (token = byte value, V = 256) of a text file. Errors: missing, directory, empty.
  static TokenDataset from_text_file(const std::string& path);
  // uint16 tokens: a raw little-endian array (nanoGPT train.bin) or an llm.c file (256 x int32
  // header: magic 20240520, version 1, token count; then the tokens). Errors: missing, empty, odd
  // byte count, llm.c count mismatch or unsupported version.
  static TokenDataset from_token_file(const std::string& path);
  // The built-in Shakespeare excerpt (byte-level), compiled into the binary.
  static TokenDataset builtin();
  // "" -> builtin(); "*.bin" -> from_token_file(); anything else -> from_text_file().
  static TokenDataset load(const std::string& path_or_empty);
  // Wraps a copy of `tokens` (tests, derived datasets).
  static TokenDataset from_tokens(std::span<const uint16_t> tokens, std::string description, bool byte_level,
                                  const std::string& alloc_name = "data.tokens");

  size_t size() const { return n_; }
  uint16_t operator[](size_t i) const { return data_[i]; }
  std::span<const uint16_t> tokens() const { return {data_, n_}; }
  // Largest token id present (-1 when empty).
  int max_token() const { return max_token_; }
  // True for byte-level data (text files, the built-in corpus): V = 256, decode with decode_bytes.
  bool byte_level() const { return byte_level_; }
  // e.g. "built-in corpus (shakespeare excerpt, 200,000 tokens)".
  const std::string& description() const { return desc_; }

  // Contiguous split into (train, val); val is the last round(size * val_fraction) tokens. Throws
  // if either part is shorter than one window of T + 1 tokens.
  std::pair<TokenDataset, TokenDataset> split(double val_fraction, int64_t T) const;

 private:
  void allocate(size_t n, std::string alloc_name);
  void finish();  // computes max_token_
  void reset() noexcept;

  uint16_t* data_ = nullptr;
  size_t n_ = 0;
  int max_token_ = -1;
  bool byte_level_ = false;
  std::string desc_, alloc_name_;
};

// Batches of B windows of T + 1 tokens: inputs = window[0..T), targets = window[1..T]. Holds a
// reference to the dataset, which must outlive it.
class BatchSampler {
 public:
  // Throws if the dataset is shorter than T + 1 tokens.
  BatchSampler(const TokenDataset& ds, int64_t B, int64_t T, uint64_t seed);

  // Random windows; the start of row b is a pure function of (seed, step, b). inputs and targets
  // hold B * T int32 each.
  void sample(uint64_t step, int32_t* inputs, int32_t* targets) const;
  // Evaluation batch `index`: row b is window (index * B + b) mod num_windows(), where window w
  // starts at w * T, so consecutive windows tile the data (wrapping at the end).
  void sequential(uint64_t index, int32_t* inputs, int32_t* targets) const;
  // Number of full windows in the dataset, and of sequential batches needed to cover them all.
  int64_t num_windows() const { return windows_; }
  int64_t num_sequential_batches() const { return (windows_ + B_ - 1) / B_; }
  // Start of row b in sample(step) (exposed for tests).
  uint64_t window_start(uint64_t step, int64_t b) const;

  int64_t B() const { return B_; }
  int64_t T() const { return T_; }

 private:
  void fill_row(uint64_t start, int64_t b, int32_t* inputs, int32_t* targets) const;
  const TokenDataset* ds_;
  int64_t B_, T_, windows_;
  uint64_t seed_;
};

// Text of byte-level tokens; bytes other than printable ASCII, '\n' and '\t' become '?'.
std::string decode_bytes(std::span<const int32_t> tokens);

// The built-in corpus text (defined in builtin_corpus.cpp).
std::string builtin_corpus_text();

}  // namespace remat::data
