// Errors in two tiers.
//  - REMAT_ASSERT: an internal invariant broke. Prints file:line and aborts.
//  - remat::Error: a user error (bad flag, file, config, budget). Thrown with a component prefix and
//    a hint; the CLI turns it into one line on stderr and a non-zero exit. Library code never exits.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace remat {

class Error : public std::runtime_error {
 public:
  // Formats "[component] what (hint: hint)".
  Error(const std::string& component, const std::string& what, const std::string& hint = "")
      : std::runtime_error("[" + component + "] " + what + (hint.empty() ? "" : " (hint: " + hint + ")")) {}
};

// Untrusted text (a tensor name, a key, a JSON token) for a one-line message: control bytes escaped
// as \xNN (with ascii_only, bytes >= 0x80 too), cut after `limit` bytes on a UTF-8 boundary.
inline std::string printable(const std::string& s, size_t limit = 80, bool ascii_only = false) {
  std::string out;
  size_t n = 0;
  for (unsigned char c : s) {
    if (++n > limit && (ascii_only || (c & 0xC0) != 0x80)) {
      out += "...";
      break;
    }
    if (c < 0x20 || c == 0x7f || (ascii_only && c >= 0x80)) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  return out;
}
// printable(s) in single quotes.
// (Appends, not "'" + std::string: GCC 12 warns -Wrestrict on the latter, a known false positive.)
inline std::string quote_name(const std::string& s) {
  std::string out(1, '\'');
  out += printable(s);
  out += '\'';
  return out;
}

[[noreturn]] inline void assert_fail(const char* cond, const char* msg, const char* file, int line) {
  std::fprintf(stderr, "remat: internal error at %s:%d: %s (%s)\n", file, line, msg, cond);
  std::abort();
}

}  // namespace remat

#define REMAT_ASSERT(cond, msg) \
  do { if (!(cond)) ::remat::assert_fail(#cond, msg, __FILE__, __LINE__); } while (0)
