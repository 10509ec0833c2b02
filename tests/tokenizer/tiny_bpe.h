// A hand-made byte-level BPE vocabulary for the tokenizer tests: the 256 byte tokens (ids = byte
// values), then "he" "ll" "hell" " w" " wo" (256..260), and <|endoftext|> at id 300 (261..299 unused).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/byte_bpe.h"

namespace remat_tok_test {

using nlohmann::json;

inline std::string mapped(const std::string& raw) {  // raw bytes -> vocabulary string
  std::string s;
  for (unsigned char b : raw) {
    const uint32_t cp = remat::tok::byte_to_char(b);
    if (cp < 0x80) s += char(cp);
    else s += {char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))};
  }
  return s;
}

inline json tiny_json() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[mapped(std::string(1, char(b)))] = b;
  const std::vector<std::string> merged = {"he", "ll", "hell", " w", " wo"};
  for (size_t i = 0; i < merged.size(); ++i) vocab[mapped(merged[i])] = 256 + int(i);
  vocab["<|endoftext|>"] = 300;
  json merges = json::array({"h e", "l l", "he ll", mapped(" ") + " w", json::array({mapped(" w"), "o"})});
  return {{"version", "1.0"},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
          {"added_tokens", json::array({{{"id", 300}, {"content", "<|endoftext|>"}, {"special", true}}})},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
}

}  // namespace remat_tok_test
