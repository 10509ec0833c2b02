// How the command line reads numbers, the environment variables remat bounds like flags, and the
// check of stdout at exit.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

namespace remat::cli {

// For --help: how numbers are read.
extern const char* const kNumbersHelp;

// `text` as a decimal whole number, rewritten in place without leading zeros (CLI11 would read 0100
// as octal). Returns "" when it is one, else "what is wrong\x1fhint" (main.cpp splits the two):
// 0x/0o/0b forms, fractions, exponents, garbage, a sign on an unsigned option, and magnitudes above
// 2^63-1 are refused.
std::string strict_integer(std::string& text, bool is_unsigned, const std::string& flag);
// `text` as a decimal number (digits, an optional fraction, an optional exponent) that is finite as
// a double. inf, nan, hexadecimal floats and garbage are refused. Same return as strict_integer.
std::string strict_float(const std::string& text, const std::string& flag);

// Attaches strict_integer / strict_float to every option of `app` and of its subcommands whose
// CLI11 type is INT, UINT or FLOAT, and adds kNumbersHelp to each --help's footer. Call it once,
// after every subcommand is registered.
void make_numbers_strict(CLI::App& app);

// Throws remat::Error for an environment variable remat or its libraries would misread:
// OMP_NUM_THREADS (each thread count libgomp reads at most max_threads()),
// REMAT_BF16_ISA (portable or avx512_bf16) and ONEDNN_MAX_CPU_ISA (oneDNN's names).
void check_environment();

// The hint for an exception from oneDNN: names ONEDNN_MAX_CPU_ISA when it is set, "" otherwise.
std::string onednn_isa_hint();

// Makes stdout a stream that records why a write failed (for finish_stdout). Call once, first.
void check_stdout_writes();

// Flushes stdout (C and C++ streams) and returns `code`, or, when a write to stdout failed at any
// point of the run, prints one line on stderr naming stdout and the cause and returns 1; when the
// failure was a closed pipe (EPIPE), returns 141 (128 + SIGPIPE) without a word, as filters do.
int finish_stdout(int code);

}  // namespace remat::cli
