#include "cli/numbers.h"

#include <cerrno>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <thread>
#include <unistd.h>
#include <vector>

#include "cli/flags.h"
#include "core/error.h"
#include "kernels/bf16.h"

namespace remat::cli {

const char* const kNumbersHelp =
    "Numbers are decimal: a leading zero is ignored (--steps 0100 is one hundred), 0x/0o/0b forms are refused, and a "
    "whole number is at most 9223372036854775807.";

namespace {

constexpr char kSep = '\x1f';  // between what is wrong and the hint, in a validator's message

std::string fail(const std::string& what, const std::string& hint) { return what + kSep + hint; }

bool digits_only(const std::string& s, size_t from, size_t to) {
  if (from >= to) return false;
  for (size_t k = from; k < to; ++k)
    if (s[k] < '0' || s[k] > '9') return false;
  return true;
}

}  // namespace

std::string strict_integer(std::string& text, bool is_unsigned, const std::string& flag) {
  const std::string shown = "'" + printable(text, 40) + "'";
  const std::string example = "e.g. " + flag + " 100";
  size_t i = 0;
  bool negative = false;
  if (!text.empty() && (text[0] == '-' || text[0] == '+')) negative = text[0] == '-', i = 1;
  // 0x10, 0o17, 0b101: refused rather than guessed, with the decimal value when it is one.
  if (text.size() >= i + 2 && text[i] == '0' && std::strchr("xXoObB", text[i + 1])) {
    const char kind = char(std::tolower(static_cast<unsigned char>(text[i + 1])));
    const int base = kind == 'x' ? 16 : kind == 'o' ? 8 : 2;
    const char* names = kind == 'x' ? "hexadecimal" : kind == 'o' ? "octal" : "binary";
    errno = 0;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(text.c_str() + i + 2, &end, base);
    const bool whole = errno == 0 && end && *end == '\0' && end != text.c_str() + i + 2;
    return fail(shown + " is " + names + "; remat reads numbers in decimal only",
                whole ? "write " + flag + " " + (negative ? "-" : "") + std::to_string(v) : example);
  }
  if (!digits_only(text, i, text.size())) {
    const bool looks_fraction = text.find_first_of(".eE") != std::string::npos && text.find_first_of("0123456789") != std::string::npos;
    return fail(shown + " is not a whole number", looks_fraction ? "write it without a fraction or exponent, " + example
                                                                 : example);
  }
  size_t first = i;
  while (first + 1 < text.size() && text[first] == '0') ++first;  // 0100 is one hundred, not 64
  const std::string digits = text.substr(first);
  const std::string max = "9223372036854775807";
  if (digits.size() > max.size() || (digits.size() == max.size() && digits > max))
    return fail(shown + " is too large (the largest whole number is 9223372036854775807)",
                "check it for a typo; " + example);
  if (is_unsigned && negative && digits != "0")
    return fail(shown + " is negative", "pass 0 or more, " + example);
  text = (negative && digits != "0" ? "-" : "") + digits;
  return "";
}

std::string strict_float(const std::string& text, const std::string& flag) {
  const std::string shown = "'" + printable(text, 40) + "'";
  const std::string example = "e.g. " + flag + " 0.5 or " + flag + " 3e-4";
  // [sign] (digits [. [digits]] | . digits) [(e|E) [sign] digits]
  size_t i = 0, n = text.size();
  if (i < n && (text[i] == '-' || text[i] == '+')) ++i;
  const size_t a = i;
  while (i < n && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  bool mantissa = i > a;
  if (i < n && text[i] == '.') {
    const size_t b = ++i;
    while (i < n && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
    mantissa = mantissa || i > b;
  }
  if (mantissa && i < n && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < n && (text[i] == '-' || text[i] == '+')) ++i;
    const size_t e = i;
    while (i < n && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
    if (i == e) mantissa = false;
  }
  if (!mantissa || i != n) {
    const bool hex = text.find_first_of("xX") != std::string::npos;
    return fail(shown + (hex ? " is hexadecimal; remat reads numbers in decimal only" : " is not a decimal number"),
                example);
  }
  const double v = std::strtod(text.c_str(), nullptr);
  if (!std::isfinite(v)) return fail(shown + " is too large (more than a double holds)", "check it for a typo; " + example);
  return "";
}

void make_numbers_strict(CLI::App& app) {
  std::vector<CLI::App*> apps{&app};
  for (CLI::App* sub : app.get_subcommands({})) apps.push_back(sub);
  for (CLI::App* a : apps) {
    a->footer(kNumbersHelp);
    for (CLI::Option* o : a->get_options()) {
      const std::string base = value_kind(o);
      const std::string flag = o->get_lnames().empty() ? o->get_name() : "--" + o->get_lnames().front();
      if (o->get_expected_min() >= 1 && !o->get_lnames().empty()) {
        // CLI11 takes the next word as the value even when it is another flag: `--calibration --steps 5`
        // would read a file named "--steps" and then stumble on "5". A value that is one of this
        // command's flags is refused by name.
        o->check(CLI::Validator(
            [a](const std::string& v) -> std::string {
              if (v.rfind("--", 0) != 0 || v.size() < 3) return "";
              const std::string name = v.substr(0, v.find('='));
              if (!a->get_option_no_throw(name)) return "";
              return "needs a value, and the next word is the flag " + name;
            },
            ""));
      }
      if (base != "INT" && base != "UINT" && base != "FLOAT") continue;
      if (base == "FLOAT")
        o->transform(CLI::Validator([flag](std::string& s) { return strict_float(s, flag); }, ""));
      else
        o->transform(CLI::Validator(
            [flag, is_unsigned = base == "UINT"](std::string& s) { return strict_integer(s, is_unsigned, flag); }, ""));
    }
  }
}

namespace {

void check_omp_num_threads() {
  const char* env = std::getenv("OMP_NUM_THREADS");
  if (!env || !*env) return;
  const std::string all = env;
  const int64_t cap = max_threads();
  const int64_t hw = std::max<int64_t>(1, int64_t(std::thread::hardware_concurrency()));
  const std::string hint = "set OMP_NUM_THREADS to 1 to " + std::to_string(cap) +
                           " (comma-separated for nested levels), or unset it to use all cores; --threads N overrides it";
  const std::string shown = "OMP_NUM_THREADS=" + printable(all, 40);
  size_t start = 0;
  while (start <= all.size()) {
    size_t end = all.find(',', start);
    if (end == std::string::npos) end = all.size();
    size_t a = start, b = end;
    while (a < b && std::isspace(static_cast<unsigned char>(all[a]))) ++a;
    while (b > a && std::isspace(static_cast<unsigned char>(all[b - 1]))) --b;
    std::string item = all.substr(a, b - a);
    // A value libgomp cannot read (0, two, 0x4) it has already warned about on stderr, before main(),
    // and ignores: it runs with its default, which is safe. Only what it reads and would act on is ours.
    if (!strict_integer(item, true, "OMP_NUM_THREADS").empty() || item.empty() || item[0] == '-') return;
    // libgomp reads it before main() but starts the threads at the first parallel region: refusing
    // here is in time (a clamp would need another re-exec; a user who typed 100000 meant something else).
    const long long v = std::stoll(item);
    if (v > cap)
      throw Error("env",
                  shown + " is above " + std::to_string(cap) + " (4x the " + std::to_string(hw) +
                      " hardware threads of this machine)",
                  hint);
    start = end + 1;
  }
}

void check_bf16_isa() {
  const char* env = std::getenv("REMAT_BF16_ISA");
  if (!env || !*env) return;
  const std::string v = env;
  using kernels::Bf16Isa;
  for (Bf16Isa isa : {Bf16Isa::Portable, Bf16Isa::Avx512Bf16})
    if (v == kernels::bf16_isa_name(isa)) return;
  throw Error("env", "REMAT_BF16_ISA=" + printable(v, 40) + " is not a bf16 path remat knows",
              std::string("use REMAT_BF16_ISA=") + kernels::bf16_isa_name(Bf16Isa::Portable) + " or " +
                  kernels::bf16_isa_name(Bf16Isa::Avx512Bf16) + " (the CPU's best, the default), or unset it");
}

// oneDNN's names (2.x, and 3.x's additions); oneDNN ignores any other value without a word.
constexpr const char* kOnednnIsas[] = {"ALL",          "SSE41",           "AVX",
                                       "AVX2",         "AVX2_VNNI",       "AVX2_VNNI_2",
                                       "AVX512_CORE",  "AVX512_CORE_VNNI", "AVX512_CORE_BF16",
                                       "AVX512_CORE_FP16", "AVX512_CORE_AMX", "AVX512_CORE_AMX_FP16",
                                       "AVX10_1_512",  "AVX10_1_512_AMX", "AVX10_1_512_AMX_FP16",
                                       "DEFAULT"};

void check_onednn_isa() {
  const char* env = std::getenv("ONEDNN_MAX_CPU_ISA");
  if (!env || !*env) return;
  for (const char* isa : kOnednnIsas)
    if (std::strcmp(env, isa) == 0) return;
  std::string names;
  for (const char* isa : kOnednnIsas) names += (names.empty() ? "" : ", ") + std::string(isa);
  throw Error("env", "ONEDNN_MAX_CPU_ISA=" + printable(env, 40) + " is not an instruction set oneDNN knows",
              "use one of " + names + " (upper case), or unset it");
}

}  // namespace

void check_environment() {
  check_omp_num_threads();
  check_bf16_isa();
  check_onednn_isa();
}

std::string onednn_isa_hint() {
  const char* env = std::getenv("ONEDNN_MAX_CPU_ISA");
  if (!env || !*env) return "";
  return "ONEDNN_MAX_CPU_ISA=" + printable(env, 40) +
         " limits oneDNN to that instruction set, and oneDNN has no kernel for this operation there; unset it, or "
         "raise it (AVX2 on this kind of CPU)";
}

namespace {
int g_stdout_errno = 0;  // the first failed write's cause

ssize_t write_stdout(void*, const char* buf, size_t n) {
  size_t done = 0;
  while (done < n) {
    const ssize_t w = ::write(STDOUT_FILENO, buf + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (!g_stdout_errno) g_stdout_errno = w < 0 ? errno : EIO;
      return done > 0 ? ssize_t(done) : -1;
    }
    done += size_t(w);
  }
  return ssize_t(n);
}
}  // namespace

void check_stdout_writes() {
  // stdio drops the errno of a write that failed inside printf; this stream keeps it.
  const bool tty = ::isatty(STDOUT_FILENO) != 0;
  std::fflush(stdout);
  if (FILE* f = ::fopencookie(nullptr, "w", cookie_io_functions_t{nullptr, write_stdout, nullptr, nullptr})) {
    std::setvbuf(f, nullptr, tty ? _IOLBF : _IOFBF, BUFSIZ);
    stdout = f;
  }
}

int finish_stdout(int code) {
  std::cout.flush();
  const bool cxx_bad = std::cout.bad();
  errno = 0;
  const bool flush_failed = std::fflush(stdout) != 0;
  const int err = errno;
  if (!flush_failed && !std::ferror(stdout) && !cxx_bad) return code;
  const int why = g_stdout_errno ? g_stdout_errno : err;
  // The reader of a pipe went away (`remat ... | head`): end as any filter does, silently, with
  // SIGPIPE's conventional status. (remat train blocks SIGPIPE, so its write fails with EPIPE
  // instead of killing it; it has saved its weights and checkpoint by then.)
  if (why == EPIPE) return 128 + SIGPIPE;
  const std::string cause = why ? std::strerror(why) : "a write failed";
  std::fprintf(stderr,
               "remat: [io] cannot write to stdout: %s; the output is incomplete (hint: %s)\n", cause.c_str(),
               why == ENOSPC ? "free space on the disk that stdout goes to, or redirect it elsewhere"
                             : "check the file or pipe that stdout goes to, then run the command again");
  return code != 0 ? code : 1;
}

}  // namespace remat::cli
