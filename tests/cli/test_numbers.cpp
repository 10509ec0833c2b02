// Numbers and what else the command line reads: every numeric flag of every command is decimal (a
// leading zero is ignored, 0x/0o/0b refused, out-of-range values refused); numbers in config.json,
// plan and calibration files are range-checked; OMP_NUM_THREADS, REMAT_BF16_ISA and
// ONEDNN_MAX_CPU_ISA are refused when remat or its libraries would misread them; a write to stdout
// that fails fails the command.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>

#include "run.h"

namespace {

using namespace remat_cli_test;
using json = nlohmann::json;

const std::vector<std::string> kTiny = {"--layers", "2", "--channels", "64", "--heads", "4", "--batch", "2"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// `env... remat args...` through /bin/sh with stdout to `out` (run.h's children have a pipe and
// OMP_NUM_THREADS=1): the exit code and stderr.
RunResult run_with(const TempDir& d, const std::string& env, const std::vector<std::string>& args,
                   const std::string& out = "/dev/null") {
  std::string cmd = "env OMP_NUM_THREADS=1 " + env + " " + quoted(REMAT_BINARY);
  for (const std::string& a : args) cmd += " " + quoted(a);
  cmd += " >" + out + " 2>" + quoted(d / "stderr.txt");
  RunResult r;
  const int status = std::system(cmd.c_str());
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (r.exit_code > 128) r.signal = r.exit_code - 128;  // the shell's report of a signal
  r.err = slurp(d / "stderr.txt");
  return r;
}

TEST(CliNumbers, LeadingZeroIsDecimal) {
  // CLI11 read 010 as octal 8, and 016 as 14; 08 was an error.
  const RunResult r = run_remat(tiny_train(with(kTiny, {"--steps", "010", "--seq", "016"})));
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find("seq 16, 10 steps"), std::string::npos) << r.out;
  const RunResult e = run_remat(tiny_train(with(kTiny, {"--steps", "1", "--seq", "08"})));
  EXPECT_EQ(e.exit_code, 0) << e.describe();
}

TEST(CliNumbers, OtherBasesAreRefusedOnEveryCommand) {
  TempDir d;
  check_user_error(run_remat({"plan", "--layers", "0x10"}), 2, {"--layers '0x10' is hexadecimal", "decimal only", "--layers 16"});
  check_user_error(run_remat({"plan", "--seq", "0o17"}), 2, {"--seq '0o17' is octal", "--seq 15"});
  check_user_error(run_remat({"plan", "--batch", "0b10"}), 2, {"--batch '0b10' is binary", "--batch 2"});
  check_user_error(run_remat(tiny_train({"--steps", "0x10"})), 2, {"--steps", "hexadecimal"});
  check_user_error(run_remat({"bench", "--timed-steps", "0x2"}), 2, {"--timed-steps", "hexadecimal"});
  check_user_error(run_remat({"trace", "--seq", "0x20"}), 2, {"--seq", "hexadecimal"});
  check_user_error(run_remat({"grads", "--seq", "0x20"}), 2, {"--seq", "hexadecimal"});
  check_user_error(run_remat({"sample", "--tokens", "0x20"}), 2, {"--tokens", "hexadecimal"});
  check_user_error(run_remat({"calibrate", "--repeats", "0x2", "--out", d / "c.json"}), 2, {"--repeats", "hexadecimal"});
  check_user_error(run_remat({"plan", "--layers", "1e3"}), 2, {"--layers '1e3' is not a whole number"});
}

TEST(CliNumbers, OutOfRangeIsRefusedNotClamped) {
  // Was clamped to 2^63-1, then refused with a hint to pass a negative number.
  const std::string line =
      check_user_error(run_remat({"plan", "--channels", "99999999999999999999"}), 2, {"--channels", "too large", "9223372036854775807"});
  EXPECT_EQ(line.find("-9"), std::string::npos) << line;
  check_user_error(run_remat(tiny_train({"--lr", "1e999"})), 2, {"--lr '1e999' is too large"});
  check_user_error(run_remat(tiny_train({"--lr", "inf"})), 2, {"--lr 'inf' is not a decimal number"});
  check_user_error(run_remat(tiny_train({"--lr", "0x1p-3"})), 2, {"--lr", "hexadecimal"});
}

TEST(CliNumbers, HelpSaysHowNumbersAreRead) {
  for (const char* cmd : {"train", "plan", "sample", "calibrate"}) {
    const RunResult r = run_remat({cmd, "--help"});
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_NE(r.out.find("Numbers are decimal"), std::string::npos) << cmd;
  }
}

TEST(CliNumbers, FailedWriteToStdoutFailsTheCommand) {
  TempDir d;
  // Was exit 0 with the output lost.
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"plan", "--json"}, tiny_train(with(kTiny, {"--steps", "1", "--seq", "16"})),
        std::vector<std::string>{"--help"}}) {
    const RunResult r = run_with(d, "", args, "/dev/full");
    check_user_error(r, 1, {"[io]", "stdout", "No space left on device"});
  }
  EXPECT_EQ(run_with(d, "", {"plan", "--json"}, quoted(d / "plan.json")).exit_code, 0);
  EXPECT_TRUE(json::accept(slurp(d / "plan.json")));
}

TEST(CliNumbers, OmpNumThreadsIsBounded) {
  TempDir d;
  // Was a segfault inside libgomp (exit 139).
  const RunResult r = run_with(d, "OMP_NUM_THREADS=100000", tiny_train(with(kTiny, {"--steps", "1", "--seq", "16"})));
  check_user_error(r, 1, {"[env]", "OMP_NUM_THREADS=100000 is above", "--threads"});
  check_user_error(run_with(d, "OMP_NUM_THREADS=2,100000", {"plan"}), 1, {"OMP_NUM_THREADS=2,100000 is above"});
  EXPECT_EQ(run_with(d, "OMP_NUM_THREADS=2,1", {"plan"}).exit_code, 0);
}

TEST(CliNumbers, Bf16AndOnednnIsaVariablesAreChecked) {
  TempDir d;
  // Both were ignored without a word.
  check_user_error(run_with(d, "REMAT_BF16_ISA=bogus", {"plan"}), 1, {"REMAT_BF16_ISA=bogus", "portable", "avx512_bf16"});
  check_user_error(run_with(d, "ONEDNN_MAX_CPU_ISA=bogus", {"plan"}), 1, {"ONEDNN_MAX_CPU_ISA=bogus", "AVX2", "SSE41"});
  EXPECT_EQ(run_with(d, "REMAT_BF16_ISA=portable ONEDNN_MAX_CPU_ISA=AVX2", {"plan"}).exit_code, 0);
}

// A LLaMA model folder (config.json beside the weights), its config edited by `edit`.
std::string llama_folder(const TempDir& d, const std::function<void(json&)>& edit) {
  const std::string dir = d / "llama";
  const RunResult r = run_remat({"train", "--preset", "llama-tiny", "--layers", "2", "--channels", "64", "--heads", "4",
                                 "--batch", "2", "--seq", "16", "--steps", "1", "--eval-every", "0", "--sample-tokens", "0",
                                 "--no-progress", "--save", dir});
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  json cfg = json::parse(slurp(dir + "/config.json"));
  edit(cfg);
  d.write("llama/config.json", cfg.dump(1));
  return dir;
}

TEST(CliNumbers, ConfigJsonNumbersAreRangeChecked) {
  TempDir d;
  // rope_theta 1e300 became infinity, was saved as null and reloaded as 10000.
  const std::string dir = llama_folder(d, [](json&) {});
  for (const auto& [key, value] : {std::pair<const char*, json>{"rope_theta", 1e300}, {"rope_theta", 1e-45},
                                   {"rms_norm_eps", 1e30}, {"num_hidden_layers", 1000000000000LL}}) {
    json cfg = json::parse(slurp(dir + "/config.json"));
    cfg["rope_theta"] = 10000.0;
    cfg[key] = value;
    d.write("llama/config.json", cfg.dump(1));
    check_user_error(run_remat({"sample", "--init-from", dir, "--tokens", "1"}), 1, {"[config]", key, "config.json"});
  }
}

TEST(CliNumbers, PlanAndCalibrationNumbersAreRangeChecked) {
  TempDir d;
  const std::string plan = d / "plan.json";
  ASSERT_EQ(run_remat({"plan", "--preset", "tiny", "--step-budget", "6MiB", "--out", plan}).exit_code, 0);
  json p = json::parse(slurp(plan));
  // Was "-1486618624 blocks".
  p["model"]["layers"] = 1000000000000000000LL;
  d.write("bad_plan.json", p.dump());
  check_user_error(run_remat({"trace", "--plan", d / "bad_plan.json"}), 1, {"bad_plan.json", "model.layers", "at most 100000"});
  p = json::parse(slurp(plan));
  p["model"]["dropout"] = 1e300;  // a float cannot hold it
  d.write("bad_plan.json", p.dump());
  check_user_error(run_remat({"trace", "--plan", d / "bad_plan.json"}), 1, {"bad_plan.json", "model.dropout"});

  const std::string cal = d / "cal.json";
  ASSERT_EQ(run_remat({"calibrate", "--preset", "tiny", "--batch", "2", "--out", cal, "--repeats", "1", "--untimed-rounds", "0"}).exit_code, 0);
  for (const auto& [key, value] : {std::pair<const char*, double>{"forward_pass", 1e308}, {"forward_pass", 0}, {"rest", 1e300}}) {
    json c = json::parse(slurp(cal));
    c[key] = value;
    d.write("bad_cal.json", c.dump());
    check_user_error(run_remat({"plan", "--preset", "tiny", "--batch", "2", "--calibration", d / "bad_cal.json"}), 1,
                     {"bad_cal.json", key});
  }
  json c = json::parse(slurp(cal));
  c["model"]["rope_theta"] = 1e-45;
  d.write("bad_cal.json", c.dump());
  check_user_error(run_remat({"plan", "--preset", "tiny", "--batch", "2", "--calibration", d / "bad_cal.json"}), 1,
                   {"bad_cal.json", "model.rope_theta"});
}

}  // namespace

// A flag where a value belongs is refused by name on every command, instead of being read as a file
// name (`--calibration --steps 5` read a calibration file called "--steps"). The help shows the
// argument of a flag that takes one.
TEST(CliValues, AFlagIsNotTakenAsTheValueOfTheFlagBefore) {
  check_user_error(run_remat({"train", "--step-budget", "30MiB", "--calibration", "--steps", "5"}), 2,
                   {"--calibration", "needs a value", "the flag --steps"});
  check_user_error(run_remat({"plan", "--out", "--step-budget", "3MiB"}), 2, {"--out", "needs a value", "the flag --step-budget"});
  check_user_error(run_remat({"sample", "--init-from", "--tokens", "3"}), 2, {"--init-from", "the flag --tokens"});
  const RunResult h = run_remat({"train", "--help"});
  EXPECT_EQ(h.exit_code, 0);
  EXPECT_NE(h.out.find("--calibration FILE"), std::string::npos) << "--calibration must show that it takes a file";
}
