// Byte-level BPE (Sennrich et al. 2016, on bytes as in Radford et al. 2019): the text is cut by
// GPT-2's or LLaMA 3's pre-tokenizer (pretokenize.h), each piece becomes its bytes' tokens, and merges apply in
// rank order. Added tokens (GPT-2's <|endoftext|>) are matched in the text first, as Hugging Face's
// tokenizers does, and never merged with their neighbours.
// Invalid UTF-8 is encoded byte by byte like any other bytes, so decode(encode(x)) == x for all x.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"

namespace remat::tok {

// What the files say, before it is checked: token strings as written (GPT-2's byte-to-character
// mapping, e.g. "Ġthe" for " the").
struct BpeSpec {
  std::string source;  // file name(s), for messages
  std::vector<std::pair<std::string, int64_t>> vocab;
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  struct Added {
    std::string content;
    int64_t id;
    bool special;
  };
  std::vector<Added> added;
  bool ignore_merges = false;  // a piece that is a whole token is that token (LLaMA 3)
  Pretokenizer pre = Pretokenizer::Gpt2;
};

// GPT-2's bytes_to_unicode: byte b is written as this code point in vocabularies and merges.
uint32_t byte_to_char(uint8_t b);

class ByteBpe final : public Tokenizer {
 public:
  // Throws remat::Error("tokenizer") naming spec.source for: a token that is not byte-level, a
  // negative or repeated id, a merge naming an unknown token, or a merge whose result is not in the
  // vocabulary.
  explicit ByteBpe(const BpeSpec& spec);

  void encode(std::string_view text, std::vector<int32_t>& out) const override;
  using Tokenizer::encode;
  std::string decode(std::span<const int32_t> ids) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(bytes_.size()); }
  std::string name() const override;
  std::optional<int32_t> document_start() const override { return eot_; }

 private:
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  void encode_ordinary(std::string_view text, std::vector<int32_t>& out) const;

  std::string source_;
  std::vector<std::string> bytes_;  // id -> its bytes
  std::vector<bool> present_;       // id -> in the vocabulary (ids may have gaps)
  std::array<int32_t, 256> byte_id_{};
  struct Merge {
    int32_t rank, id;
  };
  std::unordered_map<uint64_t, Merge> merges_;  // (left << 32 | right) -> rank, merged id
  std::unordered_map<std::string, int32_t> whole_;  // bytes -> id, for ignore_merges
  bool ignore_merges_ = false;
  Pretokenizer pre_ = Pretokenizer::Gpt2;
  std::vector<std::pair<std::string, int32_t>> added_;  // longest first
  std::array<bool, 256> added_first_{};                 // a byte that starts an added token
  std::optional<int32_t> eot_;
};

// Readers of the two file layouts (bpe_files.cpp).
BpeSpec read_tokenizer_json(const std::string& path);
BpeSpec read_vocab_merges(const std::string& vocab_path, const std::string& merges_path);

}  // namespace remat::tok
