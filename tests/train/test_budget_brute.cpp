// The whole-step budget plan against brute force over every plan of the DP's family (every schedule
// x per-block policy), each priced by dry run of the whole step, at 200+ budgets: the chosen plan is
// never slower than the fastest plan that fits. Disabled: the planner's candidates are the DP's
// activation frontiers and the textbook rows, and a plan off them can peak lower over the whole step
// (the DP does not yet carry activation gradients, transients and workspace in its state); run with
// --gtest_also_run_disabled_tests to measure the gap.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>

#include "planner/budget.h"

using namespace remat;

namespace {

struct Priced {
  size_t peak;
  double cost;
};

void check(Arch arch, DType precision) {
  PlanTarget t;
  t.cfg.arch = arch;
  t.cfg.L = 3; t.cfg.C = 32; t.cfg.NH = 4; t.cfg.T = 64; t.cfg.V = 256;
  if (arch == Arch::Llama) t.cfg.KVH = 2;
  t.cfg.precision = precision;
  t.batch = t.micro = 4;
  t.T = 64;
  const std::vector<KernelPlans> kernels = plan_kernels(t);
  const Candidates& c = kernels.front().candidates;
  std::vector<Priced> all;
  planner::enumerate_family(int(t.cfg.L), int(c.problem.traces.size()), [&](const Schedule& s, const std::vector<int>& pol) {
    const StepPlan sp = price_plan(c, chain_plan(c, s, pol), t);
    all.push_back({sp.step.peak_total, plan_cost(sp)});
  });
  size_t lo = std::numeric_limits<size_t>::max(), hi = 0;
  for (const Priced& p : all) lo = std::min(lo, p.peak), hi = std::max(hi, p.peak);
  int worse = 0, n = 0;
  double worst = 0;
  for (int k = 0; k <= 220; ++k) {
    const size_t b = lo + (hi - lo) * size_t(k) / 220;
    double best = std::numeric_limits<double>::infinity();
    for (const Priced& p : all)
      if (p.peak <= b) best = std::min(best, p.cost);
    const double got = plan_cost(plan_for_budget(t, b, kernels));
    ++n;
    if (got > best * (1 + 1e-12)) {
      ++worse;
      worst = std::max(worst, got / best);
    }
  }
  std::printf("%zu plans, %d budgets: brute force faster at %d (worst ratio %.3f)\n", all.size(), n, worse, worst);
  EXPECT_EQ(worse, 0);
}

}  // namespace

TEST(BudgetBruteForce, DISABLED_Gpt2Fp32) { check(Arch::GPT2, DType::F32); }
TEST(BudgetBruteForce, DISABLED_LlamaBf16) { check(Arch::Llama, DType::BF16); }
