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

[[noreturn]] inline void assert_fail(const char* cond, const char* msg, const char* file, int line) {
  std::fprintf(stderr, "remat: internal error at %s:%d: %s (%s)\n", file, line, msg, cond);
  std::abort();
}

}  // namespace remat

#define REMAT_ASSERT(cond, msg) \
  do { if (!(cond)) ::remat::assert_fail(#cond, msg, __FILE__, __LINE__); } while (0)
