// Text that users read: words for a pasted command line, and numbers as people write them.
#pragma once
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <string>

namespace remat {

// A word for a pasted command line: as is when plain, else in single quotes (a quote inside as '\'').
inline std::string shell_quoted(const std::string& v) {
  bool plain = !v.empty();
  for (char ch : v)
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || std::string("._:,+-/=").find(ch) != std::string::npos))
      plain = false;
  if (plain) return v;
  std::string q = "'";
  for (char ch : v) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

// 1234567 -> "1,234,567".
// printf's %g: the shortest of fixed and exponent notation, 6 significant digits ("0.1", "1e-05").
inline std::string short_number(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

inline std::string with_commas(uint64_t v) {
  const std::string s = std::to_string(v);
  std::string r;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i && (s.size() - i) % 3 == 0) r += ',';
    r += s[i];
  }
  return r;
}

}  // namespace remat
