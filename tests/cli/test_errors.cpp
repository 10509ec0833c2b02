// Bad input to the `remat` command line: one line on stderr ("remat: [component] what (hint: ...)"),
// a non-zero exit (1 for remat::Error, 2 for a parse error), never a signal, abort or "terminate".
#include <gtest/gtest.h>

#include <cstdint>
#include <regex>
#include <string>
#include <vector>

#include "run.h"

namespace {

using namespace remat_cli_test;

#define EXPECT_USER_ERROR(r, ...)              \
  do {                                         \
    SCOPED_TRACE("expected a user error");     \
    check_user_error((r), 1, {__VA_ARGS__});   \
  } while (0)
#define EXPECT_PARSE_ERROR(r, ...)             \
  do {                                         \
    SCOPED_TRACE("expected a parse error");    \
    check_user_error((r), 2, {__VA_ARGS__});   \
  } while (0)

RunResult train(std::vector<std::string> extra, const std::string& cwd = "") {
  return run_remat(tiny_train(std::move(extra)), cwd);
}

// Writes a tiny model (L=2 C=64 T=64 V=256, one step trained) with `remat train --save`; returns its path.
std::string save_tiny(const TempDir& d) {
  const auto r = train({"--steps", "1", "--save", d / "w.safetensors"});
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  return d / "w.safetensors";
}

// ---- data ----

TEST(CliErrors, MissingDataFile) {
  TempDir d;
  EXPECT_USER_ERROR(train({"--steps", "1", "--data", d / "nope.txt"}), "[data]", "nope.txt", "does not exist");
}

TEST(CliErrors, EmptyDataFile) {
  TempDir d;
  EXPECT_USER_ERROR(train({"--steps", "1", "--data", d.write("empty.txt", "")}), "[data]", "empty.txt", "empty");
}

TEST(CliErrors, TokenFileWithOddByteCount) {
  TempDir d;
  EXPECT_USER_ERROR(train({"--steps", "1", "--data", d.write("x.bin", std::string("\x01\x00\x02", 3))}), "x.bin",
                    "odd byte count (3)");
}

// ---- sequence length vs block size ----

TEST(CliErrors, SeqAboveBlockSize) {
  EXPECT_USER_ERROR(train({"--steps", "1", "--block-size", "32", "--seq", "64"}), "[config]", "--seq 64",
                    "block size 32");
}

TEST(CliErrors, SeqAboveBlockSizeOfInitFromFile) {
  TempDir d;
  const std::string w = save_tiny(d);
  // The architecture comes from the file (default preset)...
  EXPECT_USER_ERROR(run_remat({"train", "--init-from", w, "--seq", "128", "--steps", "0", "--eval-every", "0",
                               "--sample-tokens", "0", "--no-progress"}),
                    "--seq 128", "block size 64", "w.safetensors");
  // ...and with an explicit preset the file's block size still bounds --seq.
  EXPECT_USER_ERROR(train({"--init-from", w, "--seq", "128", "--steps", "0"}), "--seq 128", "block size 64");
}

// ---- model sizes ----

TEST(CliErrors, ChannelsNotDivisibleByHeads) {
  EXPECT_USER_ERROR(train({"--steps", "1", "--channels", "30", "--heads", "4"}), "[config]", "--channels 30",
                    "--heads 4", "not divisible");
}

TEST(CliErrors, ZeroLayers) {
  EXPECT_USER_ERROR(train({"--steps", "1", "--layers", "0"}), "--layers", "must be positive, got 0");
}

TEST(CliErrors, NegativeChannels) {
  EXPECT_USER_ERROR(train({"--steps", "1", "--channels", "-8"}), "--channels", "must be positive, got -8");
}

// -1 once silently meant "the preset's value" (--layers -1 trained L=4): every model flag refuses it.
TEST(CliErrors, MinusOneOnModelFlagsIsRefused) {
  for (const char* flag : {"--layers", "--channels", "--heads", "--seq", "--vocab", "--block-size"})
    EXPECT_USER_ERROR(train({"--steps", "1", flag, "-1"}), flag, "-1");
}

TEST(CliErrors, ZeroHeads) {
  EXPECT_USER_ERROR(train({"--steps", "1", "--heads", "0"}), "--heads", "must be positive, got 0");
}

TEST(CliErrors, ZeroVocab) {
  EXPECT_USER_ERROR(train({"--steps", "1", "--vocab", "0"}), "--vocab", "must be positive, got 0");
}

TEST(CliErrors, ZeroBatch) {
  EXPECT_USER_ERROR(train({"--steps", "1", "--batch", "0"}), "--batch", "must be positive, got 0");
}

TEST(CliErrors, NegativeSteps) {
  EXPECT_USER_ERROR(train({"--steps", "-1"}), "--steps must be at least 1, got -1");
}

TEST(CliErrors, MicroBatchDoesNotDivideBatch) {
  EXPECT_USER_ERROR(train({"--steps", "1", "--micro-batch", "3", "--batch", "8"}), "--micro-batch 3",
                    "does not divide --batch 8");
}

// Sizes whose byte counts overflow or exceed the machine: a config error, not an abort or OOM kill.
TEST(CliErrors, AbsurdSizes) {
  // Above 2^63-1: refused as typed (was clamped to 2^63-1).
  check_user_error(train({"--steps", "1", "--seq", "9999999999999999999"}), 2, {"[cli]", "--seq", "too large"});
  EXPECT_USER_ERROR(run_remat({"plan", "--seq", "9000000000000000000"}), "[config]", "absurdly large");
  EXPECT_USER_ERROR(run_remat({"plan", "--batch", "9000000000000000000"}), "[config]", "absurdly large");
  EXPECT_USER_ERROR(train({"--steps", "1", "--layers", "100000000"}), "[config]", "absurdly large");
  EXPECT_USER_ERROR(train({"--steps", "1", "--channels", "100000"}), "[config]", "machine's", "memory");
  EXPECT_USER_ERROR(run_remat({"trace", "--channels", "100000"}), "[config]", "machine's", "memory");
  EXPECT_USER_ERROR(run_remat({"bench", "--channels", "100000"}), "[config]", "machine's", "memory");
  EXPECT_USER_ERROR(train({"--steps", "1", "--batch", "100000000000"}), "[memory]");
}

// ---- command line ----

TEST(CliErrors, UnknownFlag) {
  EXPECT_PARSE_ERROR(run_remat({"train", "--frobnicate"}), "[cli]", "--frobnicate");
}

TEST(CliErrors, UnknownSubcommand) {
  EXPECT_PARSE_ERROR(run_remat({"frobnicate"}), "[cli]", "unknown command 'frobnicate'", "train");
  EXPECT_PARSE_ERROR(run_remat({"--frobnicate"}), "[cli]", "'--frobnicate'");
  EXPECT_PARSE_ERROR(run_remat({}), "[cli]", "no command");
}

TEST(CliErrors, FlagGivenTwice) {
  EXPECT_PARSE_ERROR(train({"--steps", "1", "--steps", "2"}), "--steps", "more than once");
}

TEST(CliErrors, BadNumber) {
  EXPECT_PARSE_ERROR(train({"--layers", "abc"}), "--layers", "abc");
}

// ---- safetensors ----

TEST(CliErrors, InitFromWrongShape) {
  TempDir d;
  const std::string w = save_tiny(d);
  EXPECT_USER_ERROR(train({"--steps", "0", "--init-from", w, "--channels", "32"}), "[weights]", "'wte.weight'",
                    "has shape (256, 64)", "expects (256, 32)");
}

TEST(CliErrors, InitFromTruncatedHeader) {
  TempDir d;
  const std::string json = R"({"wte.weight": {"dtype": "F32", "shape": [256, 64], "data_offsets": [0, 65536]}})";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[size_t(i)] = char((uint64_t(json.size()) >> (8 * i)) & 0xff);
  bytes += json.substr(0, json.size() / 2);
  const std::string path = d.write("trunc.safetensors", bytes);
  EXPECT_USER_ERROR(train({"--steps", "0", "--init-from", path}), "[safetensors]", "trunc.safetensors",
                    "truncated header");
  EXPECT_USER_ERROR(run_remat({"train", "--init-from", path, "--steps", "0"}), "truncated header");
}

TEST(CliErrors, InitFromMissingFile) {
  TempDir d;
  EXPECT_USER_ERROR(train({"--steps", "0", "--init-from", d / "none.safetensors"}), "none.safetensors");
}

// ---- strategies ----

TEST(CliErrors, SegmentsDoNotSumToLayers) {
  EXPECT_USER_ERROR(train({"--steps", "1", "--layers", "4", "--recompute", "segments:1,2"}), "[recompute]",
                    "sum to 3", "4 layers", "make the lengths sum to 4");
}

TEST(CliErrors, UniformZero) {
  EXPECT_USER_ERROR(train({"--steps", "1", "--recompute", "uniform:0"}), "[recompute]", "'0'", "uniform:K");
}

TEST(CliErrors, UnknownStrategy) {
  EXPECT_USER_ERROR(train({"--steps", "1", "--recompute", "banana"}), "[recompute]", "'banana'");
  EXPECT_USER_ERROR(run_remat({"trace", "--recompute", "banana"}), "'banana'");
  EXPECT_USER_ERROR(run_remat({"plan", "--recompute", "banana"}), "'banana'");
  EXPECT_USER_ERROR(run_remat({"bench", "--preset", "tiny", "--recompute", "none", "banana"}), "'banana'");
}

// ---- memory ----

TEST(CliErrors, BadMemoryLimitText) {
  EXPECT_USER_ERROR(train({"--steps", "1", "--memory-limit", "lots"}), "--memory-limit 'lots'",
                    "not a byte size");
}

TEST(CliErrors, MemoryLimitThatCannotBeMet) {
  const auto r = train({"--steps", "1", "--memory-limit", "1MiB"});
  const std::string line = check_user_error(r, 1, {"[memory]", "limit of 1.00 MiB", "live:"});
  // Names the tensor being allocated and lists what was live by category.
  EXPECT_TRUE(std::regex_search(line, std::regex("allocating '[a-z_.0-9]+' \\([0-9.]+ [KM]iB, [a-z_]+\\)"))) << line;
  EXPECT_TRUE(std::regex_search(line, std::regex("live:( [a-z_]+=[0-9.]+ [KM]?i?B)+"))) << line;
}

TEST(CliErrors, PlanBudgetThatCannotBeMet) {
  const auto r = run_remat({"plan", "--step-budget", "1KiB"});
  const std::string line = check_user_error(r, 1, {"[budget]", "--step-budget 1.0 KiB", "least whole-step peak"});
  EXPECT_TRUE(std::regex_search(line, std::regex("least whole-step peak of any plan, [0-9.]+ MiB"))) << line;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

// ---- outputs ----

TEST(CliErrors, SaveIntoMissingDirectory) {
  TempDir d;
  const auto r = train({"--steps", "1", "--save", d / "nodir/w.safetensors"});
  EXPECT_USER_ERROR(r, "[io]", "nodir", "does not exist", "mkdir");
  EXPECT_TRUE(r.out.empty()) << "must fail before training:\n" << r.out;
  const auto m = train({"--steps", "1", "--metrics-out", d / "nodir/m.jsonl"});
  EXPECT_USER_ERROR(m, "[io]", "--metrics-out", "does not exist");
  EXPECT_TRUE(m.out.empty()) << m.out;
  EXPECT_EQ(d.listing(), std::vector<std::string>{});
}

}  // namespace

namespace {
TEST(CliErrors, OutOfRangeTrainingSettings) {
  EXPECT_USER_ERROR(train({"--eval-batches", "0"}), "[train]", "--eval-batches");
  check_user_error(train({"--lr", "inf"}), 2, {"[cli]", "--lr 'inf' is not a decimal number"});
  EXPECT_USER_ERROR(train({"--warmup", "-1"}), "[train]", "--warmup");
  EXPECT_USER_ERROR(train({"--clip", "-1"}), "[train]", "--clip");
  EXPECT_USER_ERROR(train({"--weight-decay", "-0.5"}), "[train]", "--weight-decay");
}
}  // namespace
