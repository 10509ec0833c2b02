// Flags checked up front, before step 1. --memory-limit, where the dry run can tell: below --budget, or
// below the run's predicted whole step, it is refused naming both figures. The replay flags, which
// mean nothing without checkpointed segments.
#include <gtest/gtest.h>

#include "run.h"

namespace {

using namespace remat_cli_test;

TEST(MemoryLimit, BelowTheBudgetIsRefusedUpFront) {
  const RunResult r = run_remat(tiny_train({"--steps", "2", "--memory-limit", "5MiB", "--step-budget", "6MiB"}));
  check_user_error(r, 1, {"--memory-limit 5MiB is below --step-budget 6MiB"});
  EXPECT_EQ(r.out.find("step 1"), std::string::npos);
}

TEST(MemoryLimit, BelowThePredictedWholeStepIsRefusedBeforeStepOne) {
  // The tiny preset's whole step is 8.50 MiB (store-everything): 8 MiB holds its state but not a step.
  const RunResult r = run_remat(tiny_train({"--steps", "2", "--memory-limit", "8MiB"}));
  check_user_error(r, 1, {"[memory]", "--memory-limit 8MiB (8388608 B) is below this run's whole step",
                          "by the dry run", "--budget"});
  EXPECT_EQ(r.out.find("val loss"), std::string::npos) << "refused before training";
  // With the limit at the prediction, the run fits exactly.
  EXPECT_EQ(run_remat(tiny_train({"--steps", "2", "--memory-limit", "8914152"})).exit_code, 0);
}

TEST(ReplayFlags, AreRefusedWithoutSegments) {
  for (const std::vector<std::string> flags :
       {std::vector<std::string>{"--recompute-last"}, {"--segment-replay", "internals"},
        {"--recompute", "selective", "--recompute-last"}}) {
    std::vector<std::string> a{"--steps", "1"};
    a.insert(a.end(), flags.begin(), flags.end());
    check_user_error(run_remat(tiny_train(a)), 1, {"strategy none has none", "--recompute block"});
  }
  EXPECT_EQ(run_remat(tiny_train({"--steps", "1", "--recompute", "block", "--recompute-last"})).exit_code, 0);
}

// A value that would silently mean "the default" is refused; integers are echoed as typed.
TEST(UpFront, ZeroIsNotTheDefaultAndIntegersEchoAsTyped) {
  check_user_error(run_remat(tiny_train({"--steps", "1", "--micro-batch", "0"})), 1,
                   {"--micro-batch must be positive, got 0"});
  const RunResult w = run_remat(tiny_train({"--steps", "1", "--warmup", "-5"}));
  check_user_error(w, 1, {"--warmup must be >= 0, got -5 "});
  EXPECT_EQ(w.err.find("-5.0"), std::string::npos) << w.err;
  TempDir d;
  ASSERT_EQ(run_remat(tiny_train({"--steps", "1", "--save", d / "w.safetensors"})).exit_code, 0);
  d.write("t.txt", std::string(4000, 'a'));
  check_user_error(run_remat({"grads", "--init-from", d / "w.safetensors", "--heads", "4", "--data", d / "t.txt",
                              "--seq", "0", "--out", d / "g.safetensors"}),
                   1, {"--seq must be positive, got 0"});
  EXPECT_FALSE(fs::exists(d / "g.safetensors"));
}

TEST(UpFront, ColdCalibrationWarns) {
  TempDir d;
  const RunResult r = run_remat({"calibrate", "--preset", "tiny", "--batch", "2", "--seq", "16", "--untimed-rounds", "0",
                                 "--repeats", "1", "--out", d / "c.json"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.err.find("warning: --untimed-rounds 0 --repeats 1 times cold rounds"), std::string::npos) << r.err;
}

}  // namespace
