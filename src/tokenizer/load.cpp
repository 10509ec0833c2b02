// Finding and opening a tokenizer from what the user names, and the checks shared by all kinds.
#include <filesystem>

#include "core/error.h"
#include "core/text.h"
#include "tokenizer/byte_bpe.h"
#include "tokenizer/token_file.h"
#include "tokenizer/tokenizer.h"

namespace remat::tok {

std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& path);  // sentencepiece.cpp

namespace {
namespace fs = std::filesystem;
constexpr const char* kC = "tokenizer";

class Bytes final : public Tokenizer {
 public:
  void encode(std::string_view text, std::vector<int32_t>& out) const override {
    for (unsigned char c : text) out.push_back(c);
  }
  std::string decode(std::span<const int32_t> ids) const override {
    std::string s;
    s.reserve(ids.size());
    for (int32_t id : ids) {
      check_id(id, 256, name());
      s += char(id);
    }
    return s;
  }
  int64_t vocab_size() const override { return 256; }
  std::string name() const override { return "bytes (256 tokens)"; }
};

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// vocab.json -> merges.txt, encoder.json -> vocab.bpe: the merges file beside a vocabulary.
std::unique_ptr<Tokenizer> vocab_and_merges(const fs::path& vocab) {
  const fs::path merges = vocab.parent_path() / (vocab.filename() == "encoder.json" ? "vocab.bpe" : "merges.txt");
  if (!is_file(merges))
    throw Error(kC, "the vocabulary " + quote_name(vocab.string()) + " has no " + quote_name(merges.filename().string()) +
                        " beside it", "byte-level BPE needs both files; give the folder that holds them");
  return std::make_unique<ByteBpe>(read_vocab_merges(vocab.string(), merges.string()));
}
}  // namespace

size_t Tokenizer::cut(std::string_view s, size_t from, size_t* next) const {
  *next = safe_cut(s, from);
  return *next;
}

std::unique_ptr<Tokenizer> bytes_tokenizer() { return std::make_unique<Bytes>(); }

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec) {
  if (spec == "bytes") return bytes_tokenizer();
  const fs::path p(spec);
  std::error_code ec;
  if (fs::is_directory(p, ec)) {
    if (is_file(p / "tokenizer.json")) return std::make_unique<ByteBpe>(read_tokenizer_json((p / "tokenizer.json").string()));
    if (is_file(p / "vocab.json")) return vocab_and_merges(p / "vocab.json");
    if (is_file(p / "encoder.json")) return vocab_and_merges(p / "encoder.json");
    if (is_file(p / "tokenizer.model")) return load_sentencepiece((p / "tokenizer.model").string());
    throw Error(kC, "the folder " + quote_name(spec) + " holds no tokenizer",
                "looked for tokenizer.json, vocab.json + merges.txt, encoder.json + vocab.bpe and tokenizer.model; "
                "--tokenizer bytes reads text byte by byte");
  }
  if (!fs::exists(p, ec))
    throw Error(kC, "tokenizer " + quote_name(spec) + " does not exist",
                "give a tokenizer file or the model folder holding one, or 'bytes'");
  if (!is_file(p)) throw Error(kC, "tokenizer " + quote_name(spec) + " is not a regular file");
  const std::string file = p.filename().string();
  if (file == "vocab.json" || file == "encoder.json") return vocab_and_merges(p);
  if (p.extension() == ".json") return std::make_unique<ByteBpe>(read_tokenizer_json(spec));
  if (p.extension() == ".model") return load_sentencepiece(spec);
  throw Error(kC, "cannot tell what kind of tokenizer " + quote_name(spec) + " is",
              "remat reads tokenizer.json, vocab.json (+ merges.txt), encoder.json (+ vocab.bpe) and "
              "SentencePiece .model files");
}

std::optional<std::string> model_tokenizer(const std::string& model_path) {
  if (model_path.empty()) return std::nullopt;
  std::error_code ec;
  fs::path dir(model_path);
  if (!fs::is_directory(dir, ec)) dir = dir.parent_path();
  if (dir.empty()) dir = ".";
  for (const char* f : {"tokenizer.json", "vocab.json", "encoder.json", "tokenizer.model"})
    if (is_file(dir / f)) return dir.string();
  return std::nullopt;
}

bool is_bytes(const std::string& spec) { return spec.empty() || spec == "bytes"; }

void check_fits(const Tokenizer& t, int64_t model_vocab) {
  if (t.vocab_size() > model_vocab)
    throw Error(kC, "the tokenizer " + t.name() + " has more tokens than the model's embedding has rows (" +
                        with_commas(uint64_t(model_vocab)) + ")",
                "use the tokenizer that came with the model, or a model with --vocab " + std::to_string(t.vocab_size()) +
                    " or more");
}

void check_id(int32_t id, int64_t vocab_size, const std::string& name) {
  if (id < 0 || id >= vocab_size)
    throw Error(kC, "token id " + std::to_string(id) + " is outside the vocabulary of " + name,
                "the ids were made by another tokenizer, or the data is corrupt");
}

}  // namespace remat::tok
