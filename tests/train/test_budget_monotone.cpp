// The whole-step budget planner is monotone: on small chains of both architectures, fp32 and bf16,
// one kernel or --attention auto (both kernels, per block too), a sweep of budgets over the whole
// range (evenly spread, and 1 byte either side of every candidate plan's whole-step peak) never gets
// a slower plan for more memory, every plan fits its budget, and refusals happen only below every
// budget that gets a plan. Ranked by FLOPs, and by a (made-up) calibration's seconds.
#include <gtest/gtest.h>

#include <omp.h>

#include <algorithm>
#include <limits>
#include <string>

#include "core/error.h"
#include "planner/budget.h"

using namespace remat;

namespace {

ModelConfig config(Arch arch, DType precision) {
  ModelConfig cfg;
  cfg.arch = arch;
  cfg.L = 5; cfg.C = 32; cfg.NH = 4; cfg.T = 16; cfg.V = 64; cfg.dropout = 0.1f;
  if (arch == Arch::Llama) cfg.KVH = 2;
  cfg.precision = precision;
  return cfg;
}

// A made-up calibration for `t` (every term its own value; a slower replay than first pass, costlier
// policies that keep less), so that the sweep ranks plans by calibrated seconds, not FLOPs. Decimal
// seconds, as a real calibration has: not exact in binary, so the DP's table and the plan it
// reconstructs must add them in the same order.
planner::Calibration synthetic_calibration(const PlanTarget& t) {
  planner::Calibration c;
  c.cfg = t.cfg;
  c.B = t.micro;
  c.T = t.T;
  c.threads = omp_get_max_threads();
  c.repeats = 3;
  c.embed_forward = 0.001, c.head_forward = 0.002, c.head_backward = 0.004, c.embed_backward = 0.003, c.rest = 0.01;
  c.forward_pass = 0.010, c.recompute_pass = 0.012, c.free_checkpoint = 0.0001;
  double k = 1;
  for (const std::string& p : make_candidates(t.cfg, t.micro, t.T).presets) {
    c.policies.push_back({p, 0.011 + 0.0005 * k, 0.013 + 0.0007 * k, 0.02 + 0.001 * k, 0.021 + 0.0013 * k});
    k += 1;
  }
  return c;
}

void sweep(Arch arch, DType precision, bool auto_attention, bool calibrated = false) {
  PlanTarget t;
  t.cfg = config(arch, precision);
  t.batch = 4;
  t.micro = 2;
  t.T = t.cfg.T;
  t.data_bytes = 8192;
  t.allow_flash = auto_attention;
  t.per_block_attention = auto_attention;
  if (calibrated) t.calibration = synthetic_calibration(t);
  const std::vector<KernelPlans> kernels = plan_kernels(t);
  std::vector<size_t> budgets;
  size_t lo = std::numeric_limits<size_t>::max(), hi = 0;
  for (const KernelPlans& kp : kernels)
    for (const planner::ChainPlan& cp : kp.frontier) {
      const size_t peak = price_plan(kp.candidates, cp, t).step.peak_total;
      budgets.insert(budgets.end(), {peak - 1, peak, peak + 1});
      lo = std::min(lo, peak);
      hi = std::max(hi, peak);
    }
  for (int k = 0; k <= 150; ++k) budgets.push_back(lo - lo / 20 + (hi + hi / 20 - (lo - lo / 20)) * size_t(k) / 150);
  std::sort(budgets.begin(), budgets.end());
  budgets.erase(std::unique(budgets.begin(), budgets.end()), budgets.end());
  ASSERT_GE(budgets.size(), 200u);
  double last = std::numeric_limits<double>::infinity();
  int planned = 0;
  for (size_t b : budgets) {
    SCOPED_TRACE("budget " + std::to_string(b));
    try {
      const StepPlan p = plan_for_budget(t, b, kernels);
      EXPECT_LE(p.step.peak_total, b) << p.summary;
      EXPECT_LE(plan_cost(p), last * (1 + 1e-12)) << "more memory gave a slower plan: " << p.summary;
      last = plan_cost(p);
      ++planned;
    } catch (const Error& e) {
      EXPECT_EQ(planned, 0) << "refused above a budget that got a plan: " << e.what();
    }
  }
  EXPECT_GT(planned, 100);
}

}  // namespace

TEST(BudgetMonotone, Gpt2Fp32) { sweep(Arch::GPT2, DType::F32, false); }
TEST(BudgetMonotone, Gpt2Bf16) { sweep(Arch::GPT2, DType::BF16, false); }
TEST(BudgetMonotone, LlamaFp32) { sweep(Arch::Llama, DType::F32, false); }
TEST(BudgetMonotone, LlamaBf16) { sweep(Arch::Llama, DType::BF16, false); }
TEST(BudgetMonotone, Gpt2AutoAttention) { sweep(Arch::GPT2, DType::F32, true); }
TEST(BudgetMonotone, LlamaAutoAttentionBf16) { sweep(Arch::Llama, DType::BF16, true); }
TEST(BudgetMonotone, Gpt2Calibrated) { sweep(Arch::GPT2, DType::F32, false, true); }
TEST(BudgetMonotone, LlamaBf16Calibrated) { sweep(Arch::Llama, DType::BF16, false, true); }
