// Text for command lines that remat prints for pasting.
#pragma once
#include <cctype>
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

}  // namespace remat
