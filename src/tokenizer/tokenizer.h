// Tokenizers: text in, token ids out, and back. Read from the files users have, as they are:
//  - byte-level BPE (Sennrich et al. 2016; byte-level as in Radford et al. 2019, GPT-2): a Hugging
//    Face tokenizer.json, or vocab.json + merges.txt (GPT-2's own encoder.json + vocab.bpe too);
//  - SentencePiece (Kudo and Richardson 2018, LLaMA 2's tokenizer.model), through libsentencepiece;
//  - bytes: token = byte value, V = 256, what remat did before it had tokenizers.
// encode() and decode() are const and thread-safe: one tokenizer serves every thread.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace remat::tok {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Appends the ids of `text` to `out`. Any bytes are accepted: invalid UTF-8 is encoded as the
  // reference implementation does (see each tokenizer).
  virtual void encode(std::string_view text, std::vector<int32_t>& out) const = 0;
  std::vector<int32_t> encode(std::string_view text) const {
    std::vector<int32_t> out;
    encode(text, out);
    return out;
  }
  // The text of `ids`. Throws remat::Error("tokenizer") for an id outside the vocabulary.
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  // Ids are in [0, vocab_size()).
  virtual int64_t vocab_size() const = 0;
  // e.g. "byte-level BPE 'gpt2/tokenizer.json' (50,257 tokens)".
  virtual std::string name() const = 0;
  // The id that starts each document of a token file, when the tokenizer has one, as the models'
  // own data preparation puts it: GPT-2's <|endoftext|> (as llm.c does), SentencePiece's <s> (LLaMA 2).
  virtual std::optional<int32_t> document_start() const { return std::nullopt; }
  // Where text may be cut into chunks that are encoded one by one (on many threads) and still give
  // the ids of the whole text: the first chunk end at or after `from`, or std::string_view::npos;
  // the next chunk starts at *next (>= the end: bytes between are implied by how the next chunk is
  // encoded). By default, token_file.h's safe_cut, with nothing skipped.
  virtual size_t cut(std::string_view s, size_t from, size_t* next) const;
  // The chunk size remat tokenize and train use with this tokenizer.
  virtual size_t chunk_bytes() const { return size_t(1) << 20; }
  // The bytes of this tokenizer's tables in the accounting allocator (Category::Data): 0 for bytes,
  // and for SentencePiece, whose tables are the library's own.
  virtual size_t table_bytes() const { return 0; }
};

// Byte values as ids (V = 256); decode(encode(x)) == x for any bytes.
std::unique_ptr<Tokenizer> bytes_tokenizer();

// `spec` is "bytes", a folder (its tokenizer.json, vocab.json + merges.txt, encoder.json +
// vocab.bpe, or tokenizer.model, looked for in that order) or one of those files (vocab.json and
// encoder.json find their merges file beside them). Throws remat::Error("tokenizer") naming the
// file and what is wrong: missing, malformed, unsupported.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec);

// The tokenizer that came with a model: the folder `model_path` (or the folder of the file
// `model_path`) when it holds tokenizer.json, vocab.json + merges.txt, encoder.json + vocab.bpe or
// tokenizer.model; else nullopt.
std::optional<std::string> model_tokenizer(const std::string& model_path);

// Text through a tokenizer, for a run's data or a prompt: "" or "bytes" is byte-level (no tokenizer).
bool is_bytes(const std::string& spec);

// Throws remat::Error("tokenizer") when the tokenizer's ids do not fit a model's embedding of
// `model_vocab` rows.
void check_fits(const Tokenizer& t, int64_t model_vocab);

// Throws remat::Error("tokenizer", "token id X is outside the vocabulary of N tokens ...").
void check_id(int32_t id, int64_t vocab_size, const std::string& name);

}  // namespace remat::tok
