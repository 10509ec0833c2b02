// The whole-step frontier (planner/frontier.h), what `remat plan` prints and draws: no plan the
// planner weighs beats a frontier plan on both whole-step peak and cost, and the budget's plan is the
// frontier's: for every budget, plan_for_budget's plan costs what the cheapest frontier plan that
// fits costs, and a budget below the frontier's first plan is refused naming that plan's peak. With
// the DP's activation frontier drawn against whole-step bytes, a 4-layer GPT-2 listed a plan at
// 28.14 MiB and 1.321x beside another at 28.14 MiB and 1.241x.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "planner/budget.h"
#include "planner/frontier.h"

using namespace remat;

namespace {

struct Target {
  std::string name;
  PlanTarget t;
};

std::vector<Target> targets() {
  ModelConfig four = preset("shakespeare");  // `remat plan --layers 4`
  four.L = 4;
  ModelConfig llama = preset("llama-tiny");
  ModelConfig tiny = preset("tiny");
  std::vector<Target> out{{"gpt2 L=4", {four, 8, 8, four.T, 800000, false, std::nullopt}},
                          {"llama-tiny", {llama, 4, 2, llama.T, 0, false, std::nullopt}},
                          {"tiny, --attention auto", {tiny, 8, 8, tiny.T, 0, true, std::nullopt}}};
  out.back().t.per_block_attention = true;
  return out;
}

// Every plan a budget chooses among, priced whole-step: the DP's frontiers and the textbook
// strategies under every policy.
std::vector<StepPlan> every_plan(const PlanTarget& t, const std::vector<KernelPlans>& kernels) {
  std::vector<StepPlan> all;
  for (const KernelPlans& kp : kernels) {
    for (const auto* list : {&kp.frontier, &kp.finer})
      for (const planner::ChainPlan& cp : *list) all.push_back(price_plan(kp.candidates, cp, t));
    const int L = int(kp.candidates.cfg.L);
    for (const std::string& policy : kp.candidates.problem.policy_names)
      for (const char* name : {"none", "all", "block", "sqrt"})
        for (bool last : {false, true})
          if (!(last && std::string(name) == "none"))
            all.push_back(price_strategy(kp.candidates, parse_strategy(name, L, last), policy, t));
  }
  return all;
}

TEST(Frontier, NoPlanBeatsAFrontierPlanOnBoth) {
  for (const Target& tg : targets()) {
    SCOPED_TRACE(tg.name);
    const std::vector<KernelPlans> kernels = plan_kernels(tg.t);
    const std::vector<StepPlan> front = step_frontier(tg.t, kernels);
    ASSERT_GE(front.size(), 2u);
    for (size_t k = 1; k < front.size(); ++k) {  // ascending whole step, descending cost
      EXPECT_GT(front[k].step.peak_total, front[k - 1].step.peak_total);
      EXPECT_LT(plan_cost(front[k]), plan_cost(front[k - 1]));
    }
    for (const StepPlan& f : front) EXPECT_EQ(f.step.peak_total, dry_run_plan(f, tg.t.data_bytes).peak_total) << f.summary;
    const std::vector<StepPlan> all = every_plan(tg.t, kernels);
    for (const StepPlan& f : front)
      for (const StepPlan& q : all) {
        const bool beats = q.step.peak_total <= f.step.peak_total && plan_cost(q) <= plan_cost(f) &&
                           (q.step.peak_total < f.step.peak_total || plan_cost(q) < plan_cost(f));
        EXPECT_FALSE(beats) << q.summary << " (" << q.step.peak_total << " B, " << plan_cost(q) << ") beats "
                            << f.summary << " (" << f.step.peak_total << " B, " << plan_cost(f) << ")";
      }
    // And every plan is matched or beaten by a frontier plan.
    for (const StepPlan& q : all) {
      bool covered = false;
      for (const StepPlan& f : front)
        covered = covered || (f.step.peak_total <= q.step.peak_total && plan_cost(f) <= plan_cost(q));
      EXPECT_TRUE(covered) << q.summary;
    }
  }
}

TEST(Frontier, TheBudgetsPlanIsOnTheFrontier) {
  for (const Target& tg : targets()) {
    SCOPED_TRACE(tg.name);
    const std::vector<KernelPlans> kernels = plan_kernels(tg.t);
    const std::vector<StepPlan> front = step_frontier(tg.t, kernels);
    std::vector<size_t> budgets;
    for (const StepPlan& f : front) budgets.insert(budgets.end(), {f.step.peak_total, f.step.peak_total + 4096});
    budgets.push_back(front.back().step.peak_total * 2);
    for (size_t b : budgets) {
      const StepPlan p = plan_for_budget(tg.t, b, kernels);
      const StepPlan* fits = nullptr;  // the frontier's cheapest that fits: its last that fits
      for (const StepPlan& f : front)
        if (f.step.peak_total <= b) fits = &f;
      ASSERT_NE(fits, nullptr) << b;
      EXPECT_LE(p.step.peak_total, b);
      EXPECT_EQ(plan_cost(p), plan_cost(*fits)) << "budget " << b << ": " << p.summary << " vs " << fits->summary;
    }
    // Below the frontier's first plan nothing fits, and the refusal names its peak.
    try {
      plan_for_budget(tg.t, front.front().step.peak_total - 1, kernels);
      ADD_FAILURE() << "a budget below the least whole step was met";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("least whole-step peak of any plan, " +
                                           format_bytes(front.front().step.peak_total)),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
