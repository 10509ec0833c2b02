// A budget is the process's: `remat train --budget` keeps the peak resident set (VmHWM) inside it,
// the step, validation, the sample and the runtime included, and every run predicts its process
// peak before the first step. Each case is read twice: from the child's own report (its VmHWM, in
// --report-json) and from outside, by wait4's ru_maxrss. The prediction's stated bound: the peak
// is at most the prediction, and the prediction at most 2% + 8 MiB above the peak.
// Resident sets mean nothing under AddressSanitizer (its shadow memory is in them): skipped there.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "run.h"

namespace {

using namespace remat_cli_test;
using json = nlohmann::json;

constexpr double kMiB = 1024.0 * 1024.0;

class ProcessMemory : public ::testing::Test {
 protected:
  void SetUp() override {
#ifdef REMAT_CLI_TEST_ASAN
    GTEST_SKIP() << "AddressSanitizer's shadow memory is part of the resident set";
#endif
  }
  // `remat train args --report-json r.json`: its "process" record, checked against wait4's figure.
  json train(std::vector<std::string> args) {
    args.insert(args.begin(), "train");
    args.insert(args.end(), {"--no-progress", "--report-json", dir / "r.json"});
    const RunResult r = run_remat(args, "", 300);
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    out = r.out;
    const json p = json::parse(slurp(dir / "r.json")).at("process");
    const double peak = p.at("peak_rss_bytes").get<double>();
    // The process's own VmHWM, read before it exits, and the kernel's, read after: the latter may add
    // the exit's last bytes, and includes the test binary's resident set at the fork (a small
    // process), so it is the larger, by little.
    outside = double(r.max_rss_kib) * 1024.0;
    EXPECT_GE(outside, peak * 0.99) << r.out;
    EXPECT_LE(outside, peak + 4 * kMiB) << r.out;
    EXPECT_NE(r.out.find("process peak "), std::string::npos) << r.out;
    return p;
  }
  // The stated bound of the prediction.
  void expect_predicted(const json& p) {
    const double peak = p.at("peak_rss_bytes").get<double>(), pred = p.at("predicted_bytes").get<double>();
    EXPECT_LE(peak, pred) << "the process passed its prediction\n" << out;
    EXPECT_LE(pred, peak * 1.02 + 8 * kMiB) << "the prediction is loose\n" << out;
    // The split adds up: accounted step + the allocator's reserve + the runtime = the peak.
    EXPECT_EQ(p.at("accounted_step_bytes").get<double>() + p.at("allocator_reserve_bytes").get<double>() +
                  p.at("runtime_bytes").get<double>(),
              peak);
  }
  TempDir dir;
  std::string out;
  double outside = 0;
};

}  // namespace

// The example that peaked at 618 MB of RSS under --budget 200MB: three steps, two validations and a
// 200-token sample, now inside 200 MB as the operating system counts it.
TEST_F(ProcessMemory, BudgetBoundsTheWholeProcess) {
  const json p = train({"--layers", "6", "--channels", "192", "--heads", "6", "--vocab", "1000", "--seq", "256",
                        "--batch", "8", "--threads", "1", "--budget", "200MB", "--steps", "3", "--eval-every", "2",
                        "--sample-tokens", "200"});
  EXPECT_LE(p.at("peak_rss_bytes").get<double>(), 200e6) << out;
  EXPECT_LE(outside, 200e6) << out;
  EXPECT_LE(p.at("predicted_bytes").get<double>(), 200e6) << out;
  EXPECT_EQ(p.at("budget_bytes").get<double>(), 200e6);
  EXPECT_GE(p.at("headroom_bytes").get<double>(), 0.0);
  expect_predicted(p);
  EXPECT_NE(out.find("plan for --budget 190.73 MiB (the process: resident "), std::string::npos) << out;
  EXPECT_NE(out.find("; fits --budget 190.73 MiB, "), std::string::npos) << out;
}

// The main job (scripts/run.sh's flags, fewer steps): its --compare-none runs store-everything's
// steps beside the run's state, and the prediction counts them.
TEST_F(ProcessMemory, MainJobIsPredicted) {
  expect_predicted(train({"--recompute", "block", "--policy", "selective", "--compare-none", "--sample-tokens", "0",
                          "--steps", "3"}));
}

TEST_F(ProcessMemory, LlamaBf16FlashIsPredicted) {
  expect_predicted(train({"--preset", "llama-shakespeare", "--precision", "bf16", "--attention", "flash", "--steps", "2",
                          "--eval-every", "0", "--sample-tokens", "50"}));
}

// A budget below what the process holds before any step is refused with both figures.
TEST_F(ProcessMemory, ABudgetBelowTheRuntimeIsRefusedWithBothFigures) {
  for (const char* cmd : {"train", "plan"}) {
    SCOPED_TRACE(cmd);
    std::vector<std::string> a{cmd, "--preset", "tiny", "--budget", "4MiB"};
    if (std::string(cmd) == "train") a.insert(a.end(), {"--steps", "1"});
    check_user_error(run_remat(a), 1,
                     {"--budget 4.00 MiB is below what the process needs before any step: resident ",
                      "runtime allowance 12.00 MiB", "give --budget more than "});
  }
}

// --step-budget is the step alone, as the allocator counts it: the same plan on every machine.
TEST_F(ProcessMemory, StepBudgetIsTheAccountedStepAlone) {
  const RunResult r = run_remat({"plan", "--preset", "tiny", "--step-budget", "6MiB"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find("plan for --step-budget 6.00 MiB (whole step): "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("use: remat train"), std::string::npos) << r.out;
  check_user_error(run_remat({"plan", "--preset", "tiny", "--step-budget", "6MiB", "--budget", "60MiB"}), 1,
                   {"--budget and --step-budget cannot be combined"});
}
