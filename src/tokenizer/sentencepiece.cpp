// SentencePiece (Kudo and Richardson 2018) through Debian's libsentencepiece: the library that
// wrote LLaMA 2's tokenizer.model reads it, so its encoding is the reference's by construction.
#include <sentencepiece_processor.h>

#include <algorithm>
#include <string_view>

#include "core/error.h"
#include "core/text.h"
#include "tokenizer/tokenizer.h"

namespace remat::tok {

namespace {
constexpr const char* kC = "tokenizer";

// The few settings of a serialized ModelProto (sentencepiece_model.proto, proto2) that say whether
// text may be cut at a space: read from the wire format, as Debian's package installs no .pb.h.
struct SpSettings {
  bool add_dummy_prefix = true, escape_whitespaces = true;              // NormalizerSpec 3, 5
  bool split_by_whitespace = true, treat_whitespace_as_suffix = false;  // TrainerSpec 22, 24
};
bool varint(std::string_view b, size_t& i, uint64_t& v) {
  v = 0;
  for (int shift = 0; i < b.size() && shift < 64; shift += 7) {
    const uint8_t c = uint8_t(b[i++]);
    v |= uint64_t(c & 0x7F) << shift;
    if (!(c & 0x80)) return true;
  }
  return false;
}
// Calls f(field, value) for each varint field of message `b`, and sub(field, bytes) for each
// length-delimited one; false when `b` is not a well-formed message.
template <class F, class S>
bool walk(std::string_view b, F&& f, S&& sub) {
  for (size_t i = 0; i < b.size();) {
    uint64_t key, v;
    if (!varint(b, i, key)) return false;
    const uint64_t field = key >> 3;
    switch (key & 7) {
      case 0:
        if (!varint(b, i, v)) return false;
        f(field, v);
        break;
      case 1: i += 8; break;
      case 5: i += 4; break;
      case 2:
        if (!varint(b, i, v) || v > b.size() - i) return false;
        sub(field, b.substr(i, size_t(v)));
        i += size_t(v);
        break;
      default: return false;
    }
    if (i > b.size()) return false;
  }
  return true;
}
SpSettings read_settings(std::string_view model) {
  SpSettings st;
  const auto none = [](uint64_t, uint64_t) {};
  walk(model, none, [&](uint64_t field, std::string_view m) {
    if (field == 2)
      walk(m, [&](uint64_t f, uint64_t v) {
        if (f == 22) st.split_by_whitespace = v != 0;
        if (f == 24) st.treat_whitespace_as_suffix = v != 0;
      }, [](uint64_t, std::string_view) {});
    if (field == 3)
      walk(m, [&](uint64_t f, uint64_t v) {
        if (f == 3) st.add_dummy_prefix = v != 0;
        if (f == 5) st.escape_whitespaces = v != 0;
      }, [](uint64_t, std::string_view) {});
  });
  return st;
}
bool ascii_alnum(char c) { return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z'); }

class SentencePiece final : public Tokenizer {
 public:
  explicit SentencePiece(const std::string& path) : path_(path) {
    const auto st = sp_.Load(path);
    if (!st.ok())
      throw Error(kC, "cannot read SentencePiece model " + quote_name(path) + ": " + printable(st.ToString(), 120),
                  "is it a tokenizer.model written by SentencePiece, and complete?");
    const SpSettings s = read_settings(sp_.serialized_model_proto());
    space_cut_ = s.add_dummy_prefix && s.escape_whitespaces && s.split_by_whitespace && !s.treat_whitespace_as_suffix;
  }
  // With a dummy prefix and pieces split at white space (LLaMA 2's settings), "... ab cd ..." gives
  // the ids of "... ab" then those of "cd ..." (whose dummy prefix is the space): chunks are cut at
  // such a single space and skip it. Otherwise each chunk is encoded as a text of its own.
  size_t cut(std::string_view s, size_t from, size_t* next) const override {
    if (!space_cut_) return Tokenizer::cut(s, from, next);
    for (size_t p = std::max<size_t>(from, 1); p + 1 < s.size(); ++p)
      if (s[p] == ' ' && ascii_alnum(s[p - 1]) && ascii_alnum(s[p + 1])) {
        *next = p + 1;
        return p;
      }
    return *next = std::string_view::npos;
  }
  // Its encoder slows down on long texts (python3-sentencepiece: about 6 MB/s at 4 KB, 0.8 at
  // 1 MB): short chunks, which a space cut makes free.
  size_t chunk_bytes() const override { return space_cut_ ? size_t(1) << 10 : Tokenizer::chunk_bytes(); }
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
  bool space_cut_ = false;
};
}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& path) { return std::make_unique<SentencePiece>(path); }

}  // namespace remat::tok
