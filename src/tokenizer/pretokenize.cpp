#include "tokenizer/pretokenize.h"

#include <algorithm>

#include "tokenizer/unicode_classes.h"

namespace remat::tok {

namespace {

// The ASCII classes by table: most text is mostly ASCII.
struct AsciiTable {
  CharClass c[128];
  constexpr AsciiTable() : c() {
    for (int i = 0; i < 128; ++i) {
      if ((i >= 'a' && i <= 'z') || (i >= 'A' && i <= 'Z')) c[i] = CharClass::Letter;
      else if (i >= '0' && i <= '9') c[i] = CharClass::Number;
      else if (i == ' ' || (i >= '\t' && i <= '\r')) c[i] = CharClass::Space;
      else c[i] = CharClass::Other;
    }
  }
};
constexpr AsciiTable kAscii;

struct Char {
  CharClass cls;
  int len;
};
Char char_at(std::string_view s, size_t i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return {kAscii.c[c], 1};
  const Decoded d = decode_utf8(s, i);
  return {d.cp == kInvalid ? CharClass::Other : char_class(d.cp), d.len};
}

// Length of the longest run of class `cls` starting at i.
size_t run(std::string_view s, size_t i, CharClass cls) {
  size_t j = i;
  while (j < s.size()) {
    const Char ch = char_at(s, j);
    if (ch.cls != cls) break;
    j += ch.len;
  }
  return j - i;
}

// 's|'t|'re|'ve|'m|'ll|'d at i (s[i] == '\''): its length, or 0.
size_t contraction(std::string_view s, size_t i) {
  const std::string_view rest = s.substr(i + 1);
  for (std::string_view c : {"s", "t", "re", "ve", "m", "ll", "d"})
    if (rest.starts_with(c)) return 1 + c.size();
  return 0;
}

}  // namespace

CharClass char_class(uint32_t cp) {
  if (cp < 128) return kAscii.c[cp];
  const UnicodeRange* end = kUnicodeRanges + kNumUnicodeRanges;
  const UnicodeRange* r = std::upper_bound(kUnicodeRanges, end, cp,
                                           [](uint32_t v, const UnicodeRange& x) { return v < x.lo; });
  if (r == kUnicodeRanges) return CharClass::Other;
  --r;
  return cp <= r->hi ? r->cls : CharClass::Other;
}

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const Decoded d = decode_utf8(s, i);
    if (d.cp == kInvalid) return false;
    i += d.len;
  }
  return true;
}

void gpt2_split(std::string_view s, const std::function<void(std::string_view)>& piece) {
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] == '\'') {
      if (size_t n = contraction(s, i)) {
        piece(s.substr(i, n));
        i += n;
        continue;
      }
    }
    // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional space, then a run of one class.
    const size_t start = (s[i] == ' ' && i + 1 < s.size()) ? i + 1 : i;
    const CharClass cls = char_at(s, start).cls;
    if (cls != CharClass::Space) {
      const size_t n = start - i + run(s, start, cls);
      piece(s.substr(i, n));
      i += n;
      continue;
    }
    // `\s+(?!\S)|\s+`: a run of white space up to the end of the text is one piece; before
    // anything else, the run less its last character is (so that " word" keeps its space), and a
    // run of one character is a piece alone.
    size_t j = i, last = i;
    while (j < s.size()) {
      const Char ch = char_at(s, j);
      if (ch.cls != CharClass::Space) break;
      last = j;
      j += ch.len;
    }
    const size_t end = (j == s.size() || last == i) ? j : last;
    piece(s.substr(i, end - i));
    i = end;
  }
}

std::vector<std::string_view> gpt2_pieces(std::string_view text) {
  std::vector<std::string_view> out;
  gpt2_split(text, [&](std::string_view p) { out.push_back(p); });
  return out;
}

}  // namespace remat::tok
