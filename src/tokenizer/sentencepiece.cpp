// SentencePiece (Kudo and Richardson 2018) through Debian's libsentencepiece: the library that
// wrote LLaMA 2's tokenizer.model reads it, so its encoding is the reference's by construction.
#include <sentencepiece_processor.h>

#include "core/error.h"
#include "core/text.h"
#include "tokenizer/tokenizer.h"

namespace remat::tok {

namespace {
constexpr const char* kC = "tokenizer";

class SentencePiece final : public Tokenizer {
 public:
  explicit SentencePiece(const std::string& path) : path_(path) {
    const auto st = sp_.Load(path);
    if (!st.ok())
      throw Error(kC, "cannot read SentencePiece model " + quote_name(path) + ": " + printable(st.ToString(), 120),
                  "is it a tokenizer.model written by SentencePiece, and complete?");
  }
  // SentencePiece normalizes the text (NFKC for LLaMA 2's model) and replaces invalid UTF-8 by
  // U+FFFD, so decode(encode(x)) == x holds only for text the normalization leaves as is.
  void encode(std::string_view text, std::vector<int32_t>& out) const override {
    std::vector<int> ids;
    const auto st = sp_.Encode(text, &ids);
    if (!st.ok()) throw Error(kC, "SentencePiece could not encode the text: " + printable(st.ToString(), 120));
    out.insert(out.end(), ids.begin(), ids.end());
  }
  std::string decode(std::span<const int32_t> ids) const override {
    for (int32_t id : ids) check_id(id, vocab_size(), name());
    std::string text;
    const auto st = sp_.Decode(std::vector<int>(ids.begin(), ids.end()), &text);
    if (!st.ok()) throw Error(kC, "SentencePiece could not decode the ids: " + printable(st.ToString(), 120));
    return text;
  }
  int64_t vocab_size() const override { return sp_.GetPieceSize(); }
  std::string name() const override {
    return "SentencePiece " + quote_name(path_) + " (" + with_commas(uint64_t(vocab_size())) + " tokens)";
  }
  std::optional<int32_t> document_start() const override {
    const int e = sp_.bos_id();
    return e >= 0 ? std::optional<int32_t>(e) : std::nullopt;
  }

 private:
  std::string path_;
  sentencepiece::SentencePieceProcessor sp_;
};
}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& path) { return std::make_unique<SentencePiece>(path); }

}  // namespace remat::tok
