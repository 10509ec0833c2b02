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

namespace {
bool newline(char c) { return c == '\r' || c == '\n'; }

// (?i:'s|'t|'re|'ve|'m|'ll|'d) at i (s[i] == '\''): its length in bytes, or 0. Unicode's simple case
// folding maps only U+017F (long s) to one of these letters beyond ASCII.
size_t contraction_folded(std::string_view s, size_t i) {
  size_t j = i + 1;
  // One letter of the contraction at j, case-folded: its length, or 0.
  const auto letter = [&](char want) -> size_t {
    if (j >= s.size()) return 0;
    const char c = s[j];
    if (c == want || c == want - 'a' + 'A') return 1;
    if (want == 's' && s.substr(j).starts_with("\xC5\xBF")) return 2;
    return 0;
  };
  for (std::string_view c : {"s", "t", "re", "ve", "m", "ll", "d"}) {
    j = i + 1;
    bool ok = true;
    for (char ch : c) {
      const size_t n = letter(ch);
      if (n == 0) {
        ok = false;
        break;
      }
      j += n;
    }
    if (ok) return j - i;
  }
  return 0;
}
}  // namespace

void llama3_split(std::string_view s, const std::function<void(std::string_view)>& piece) {
  size_t i = 0;
  const auto emit = [&](size_t end) {
    piece(s.substr(i, end - i));
    i = end;
  };
  while (i < s.size()) {
    if (s[i] == '\'') {
      if (size_t n = contraction_folded(s, i)) {
        emit(i + n);
        continue;
      }
    }
    const Char c0 = char_at(s, i);
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (c0.cls == CharClass::Letter) {
      emit(i + size_t(c0.len) + run(s, i + size_t(c0.len), CharClass::Letter));
      continue;
    }
    if (c0.cls != CharClass::Number && !newline(s[i]) && i + size_t(c0.len) < s.size()) {
      const size_t at = i + size_t(c0.len);
      if (char_at(s, at).cls == CharClass::Letter) {
        emit(at + run(s, at, CharClass::Letter));
        continue;
      }
    }
    // \p{N}{1,3}
    if (c0.cls == CharClass::Number) {
      size_t j = i + size_t(c0.len);
      for (int k = 1; k < 3 && j < s.size(); ++k) {
        const Char c = char_at(s, j);
        if (c.cls != CharClass::Number) break;
        j += size_t(c.len);
      }
      emit(j);
      continue;
    }
    // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
    const size_t start = (s[i] == ' ' && i + 1 < s.size()) ? i + 1 : i;
    if (char_at(s, start).cls == CharClass::Other) {
      size_t j = start + run(s, start, CharClass::Other);
      while (j < s.size() && newline(s[j])) ++j;
      emit(j);
      continue;
    }
    // White space from here on (c0 is a space): the maximal run [i, j), its last character at
    // `last`, its last \r or \n ending at `nl` (0: none).
    size_t j = i, last = i, nl = 0;
    while (j < s.size()) {
      const Char ch = char_at(s, j);
      if (ch.cls != CharClass::Space) break;
      if (newline(s[j])) nl = j + 1;
      last = j;
      j += size_t(ch.len);
    }
    if (nl) emit(nl);                                  // \s*[\r\n]+
    else emit((j == s.size() || last == i) ? j : last);  // \s+(?!\S)|\s+
  }
}

void split(Pretokenizer p, std::string_view text, const std::function<void(std::string_view)>& piece) {
  if (p == Pretokenizer::Llama3) llama3_split(text, piece);
  else gpt2_split(text, piece);
}

std::vector<std::string_view> pieces(Pretokenizer p, std::string_view text) {
  std::vector<std::string_view> out;
  split(p, text, [&](std::string_view x) { out.push_back(x); });
  return out;
}

const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

}  // namespace remat::tok
