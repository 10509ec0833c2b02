// The whole-step model (planner/whole_step.h): the whole-step peak of every plan, from a few dry runs,
// equals a dry run of that plan to the byte. Every schedule of the family over a 3-block chain with
// every assignment of candidates (both architectures, fp32 and bf16, dropout, both kernels and a mix
// of them per block, gradient accumulation, a data set in memory), every plan a budget weighs, and a
// 96-block model priced from a few dry runs whatever its depth.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "planner/budget.h"
#include "planner/whole_step.h"

using namespace remat;

namespace {

struct Target {
  std::string name;
  PlanTarget t;
};

std::vector<Target> targets() {
  ModelConfig gpt = preset("tiny");
  gpt.L = 3;
  gpt.dropout = 0.1f;
  ModelConfig llama = preset("llama-tiny");
  llama.L = 3;
  ModelConfig gpt_bf16 = gpt;
  gpt_bf16.precision = DType::BF16;
  ModelConfig llama_flash_bf16 = llama;
  llama_flash_bf16.precision = DType::BF16;
  llama_flash_bf16.attention = autograd::AttentionKind::Flash;
  std::vector<Target> out{{"gpt2 fp32 dropout, data in memory", {gpt, 4, 4, gpt.T, 800000, false, std::nullopt}},
                          {"llama fp32, 2 micro-batches", {llama, 4, 2, llama.T, 0, false, std::nullopt}},
                          {"gpt2 bf16 dropout", {gpt_bf16, 2, 2, gpt.T, 0, false, std::nullopt}},
                          {"llama bf16 flash", {llama_flash_bf16, 2, 1, llama.T, 0, false, std::nullopt}},
                          {"gpt2 both kernels per block", {gpt, 2, 2, gpt.T, 0, true, std::nullopt}}};
  out.back().t.per_block_attention = true;
  return out;
}

// The candidates of the target's last kernel set: with per-block attention, both kernels' policies.
Candidates candidates_of(const PlanTarget& t) {
  std::vector<autograd::AttentionKind> kernels;
  if (t.per_block_attention) kernels = {autograd::AttentionKind::Naive, autograd::AttentionKind::Flash};
  return make_candidates(t.cfg, t.micro, t.T, nullptr, kernels);
}

TEST(WholeStep, EqualsADryRunOfEverySchedulePerBlockCandidates) {
  for (const Target& tg : targets()) {
    SCOPED_TRACE(tg.name);
    const Candidates c = candidates_of(tg.t);
    const int L = int(c.cfg.L), P = int(c.problem.traces.size());
    ASSERT_GE(P, 2);
    std::vector<planner::ChainPlan> plans;
    size_t n = 0;
    // Every schedule of the family with every assignment of candidates would be thousands of dry runs
    // with 8 candidates: every schedule with each candidate on every block, and every assignment under
    // a few schedules.
    planner::enumerate_family(L, P, [&](const Schedule& s, const std::vector<int>& pol) {
      const bool uniform = std::all_of(pol.begin(), pol.end(), [&](int p) { return p == pol[0]; });
      if (uniform || P <= 2 || ++n % 7 == 0) plans.push_back(chain_plan(c, s, pol));
    });
    ASSERT_GT(plans.size(), 60u);
    std::vector<const planner::ChainPlan*> ptrs;
    for (const planner::ChainPlan& p : plans) ptrs.push_back(&p);
    WholeStepModel model(c, tg.t);
    const std::vector<StepMemory> priced = model.price(ptrs);
    EXPECT_EQ(model.inconsistent(), 0u);
    EXPECT_LT(model.dry_runs(), plans.size() / 4) << "the model should price most plans without a dry run";
    for (size_t j = 0; j < plans.size(); ++j) {
      const StepMemory d = dry_run_plan(unpriced_plan(c, plans[j], tg.t), tg.t.data_bytes);
      ASSERT_EQ(priced[j].peak_total, d.peak_total) << encode_schedule(plans[j].schedule);
      ASSERT_EQ(priced[j].persistent, d.persistent);
      ASSERT_EQ(priced[j].peak_activation, d.peak_activation);
    }
  }
}

// What plan_for_budget and `remat plan` weigh (budget_plans), on a deeper chain: every plan's whole step
// as a dry run of it says.
TEST(WholeStep, BudgetPlansArePricedAsTheirDryRuns) {
  for (Target tg : targets()) {
    SCOPED_TRACE(tg.name);
    tg.t.cfg.L = 6;
    const std::vector<KernelPlans> kernels = plan_kernels(tg.t);
    const std::vector<BudgetPlan> all = budget_plans(tg.t, kernels);
    ASSERT_GT(all.size(), 20u);
    for (const BudgetPlan& b : all) {
      const StepMemory d = dry_run_plan(b.plan, tg.t.data_bytes);
      ASSERT_EQ(b.plan.step.peak_total, d.peak_total) << b.plan.summary;
      ASSERT_EQ(b.plan.step.persistent, d.persistent) << b.plan.summary;
    }
  }
}

// Depth costs no dry runs: blocks alike share their keys, so GPT-3's depth is measured by about as many
// dry runs as a few blocks; the plans checked against their own dry runs are spread over the list.
TEST(WholeStep, NinetySixBlocksFromAFewDryRuns) {
  ModelConfig cfg = preset("tiny");
  cfg.L = 96;
  const PlanTarget t{cfg, 2, 2, cfg.T, 0, false, std::nullopt};
  const Candidates c = make_candidates(cfg, t.micro, t.T);
  const std::vector<planner::ChainPlan> front = planner::optimal_frontier(c.problem);
  ASSERT_GT(front.size(), 50u);
  std::vector<const planner::ChainPlan*> ptrs;
  for (const planner::ChainPlan& p : front) ptrs.push_back(&p);
  WholeStepModel model(c, t);
  const std::vector<StepMemory> priced = model.price(ptrs);
  EXPECT_EQ(model.inconsistent(), 0u);
  EXPECT_LE(model.dry_runs(), 30u);
  for (size_t j = 0; j < front.size(); j += front.size() / 12) {
    const StepMemory d = dry_run_plan(unpriced_plan(c, front[j], t), t.data_bytes);
    EXPECT_EQ(priced[j].peak_total, d.peak_total) << front[j].summary();
  }
}

}  // namespace
