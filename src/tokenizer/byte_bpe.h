// Byte-level BPE (Sennrich et al. 2016, on bytes as in Radford et al. 2019): the text is cut by
// GPT-2's or LLaMA 3's pre-tokenizer (pretokenize.h), each piece becomes its bytes' tokens, and merges apply in
// rank order. Added tokens (GPT-2's <|endoftext|>) are matched in the text first, as Hugging Face's
// tokenizers does, and never merged with their neighbours.
// Invalid UTF-8 is encoded byte by byte like any other bytes, so decode(encode(x)) == x for all x.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/allocator.h"
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
  int64_t vocab_size() const override { return static_cast<int64_t>(present_.size()); }
  std::string name() const override;
  std::optional<int32_t> document_start() const override { return eot_; }
  size_t table_bytes() const override;

 private:
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  void encode_ordinary(std::string_view text, std::vector<int32_t>& out) const;

  std::string_view token(int32_t id) const { return {text_.data() + offset_[size_t(id)], offset_[size_t(id) + 1] - offset_[size_t(id)]}; }
  // The merge of (left, right), or null; the id of a piece that is a whole token, or -1.
  struct Merge {
    uint64_t key;  // kUsed | left << 32 | right; 0: an empty slot
    int32_t rank, id;
  };
  const Merge* find_merge(int32_t left, int32_t right) const;
  int32_t find_whole(std::string_view bytes) const;

  std::string source_;
  // The tables live in the accounting allocator (Category::Data, "tokenizer.*"), flat: a 128k-token
  // vocabulary's are tens of MB, which a run's memory report must show.
  AccountedArray<char> text_;         // every id's bytes, concatenated
  AccountedArray<uint32_t> offset_;   // id -> [offset_[id], offset_[id + 1]) in text_
  AccountedArray<uint8_t> present_;   // id -> in the vocabulary (ids may have gaps)
  AccountedArray<Merge> merges_;      // open addressing on the pair, a power of two long
  AccountedArray<int32_t> whole_;     // open addressing on the bytes: id + 1, 0 empty (ignore_merges)
  AccountedArray<char> added_text_;   // added tokens' contents, longest first
  AccountedArray<uint32_t> added_off_;
  AccountedArray<int32_t> added_id_;
  std::array<int32_t, 256> byte_id_{};
  bool ignore_merges_ = false;
  Pretokenizer pre_ = Pretokenizer::Gpt2;
  std::array<bool, 256> added_first_{};  // a byte that starts an added token
  std::optional<int32_t> eot_;
};

// Readers of the two file layouts (bpe_files.cpp).
BpeSpec read_tokenizer_json(const std::string& path);
BpeSpec read_vocab_merges(const std::string& vocab_path, const std::string& merges_path);

}  // namespace remat::tok
