// Unicode classes of GPT-2's pre-tokenizer pattern (Radford et al. 2019), and UTF-8 decoding that
// never fails: a byte that does not start a valid sequence is one code point of class Invalid, so
// byte-level BPE still sees (and round-trips) every raw byte.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace remat::tok {

// Letter: \p{L}; Number: \p{N}; Space: \s (the White_Space property, as Python's `regex` module and
// Rust's regex read \s); Other: everything else, and Invalid bytes (classed as U+FFFD would be).
enum class CharClass : uint8_t { Other, Letter, Number, Space };

struct UnicodeRange {
  uint32_t lo, hi;  // inclusive
  CharClass cls;
};
// Sorted, disjoint (unicode_classes.cpp, generated).
extern const UnicodeRange kUnicodeRanges[];
extern const size_t kNumUnicodeRanges;
extern const char* const kUnicodeVersion;

// The class of code point `cp` (binary search; ASCII by a table).
CharClass char_class(uint32_t cp);

// One code point at s[i]: its value and byte length (1..4). Invalid UTF-8 (a stray continuation
// byte, a truncated or overlong sequence, a surrogate, > U+10FFFF) yields cp = kInvalid, length 1.
constexpr uint32_t kInvalid = 0xFFFFFFFF;
struct Decoded {
  uint32_t cp;
  int len;
};
inline Decoded decode_utf8(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return {c, 1};
  int len;
  uint32_t cp, min;
  if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F, min = 0x80;
  else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0F, min = 0x800;
  else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07, min = 0x10000;
  else return {kInvalid, 1};
  if (i + len > s.size()) return {kInvalid, 1};
  for (int k = 1; k < len; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return {kInvalid, 1};
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {kInvalid, 1};
  return {cp, len};
}

// True when `s` is valid UTF-8.
bool valid_utf8(std::string_view s);

}  // namespace remat::tok
