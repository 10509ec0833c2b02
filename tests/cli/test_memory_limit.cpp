// Flags checked up front, before step 1. --memory-limit, where the dry run can tell: below --budget, or
// below the run's predicted whole step, it is refused naming both figures. The replay flags, which
// mean nothing without checkpointed segments.
#include <gtest/gtest.h>

#include "run.h"

namespace {

using namespace remat_cli_test;

TEST(MemoryLimit, BelowTheBudgetIsRefusedUpFront) {
  const RunResult r = run_remat(tiny_train({"--steps", "2", "--memory-limit", "5MiB", "--budget", "6MiB"}));
  check_user_error(r, 1, {"--memory-limit 5MiB is below --budget 6MiB"});
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

}  // namespace
