#include "planner/frontier.h"

#include <algorithm>
#include <limits>
#include <string>
#include <unordered_map>

#include "core/error.h"

namespace remat {

std::vector<StepPlan> step_frontier(const PlanTarget& t, const std::vector<KernelPlans>& kernels) {
  REMAT_ASSERT(!kernels.empty() && !kernels.front().frontier.empty(), "step_frontier: no candidates");
  // Every plan plan_for_budget weighs, ranked by cost (budget_plans). The same plan often comes twice
  // (a finer frontier repeats the whole one's cheap end; a textbook strategy is a DP plan): it is
  // kept once, under the DP's name when it has one (named by what it does, as a refusal names it).
  struct Candidate {
    StepPlan plan;
  };
  std::vector<Candidate> all;
  {
    std::unordered_map<std::string, size_t> seen;
    for (BudgetPlan& b : budget_plans(t, kernels)) {
      std::string key = encode_schedule(b.plan.schedule) + "|" + attention_label(b.plan);
      for (const std::string& p : b.plan.block_policy) key += "|" + p;
      const auto [it, fresh] = seen.emplace(key, all.size());
      if (fresh) all.push_back({std::move(b.plan)});
      else if (!b.textbook) all[it->second].plan.summary = b.plan.summary;
    }
  }
  // Each plan's whole step, priced by budget_plans (planner/whole_step.h), ascending in cost: a plan is
  // on the frontier when it peaks lower than every cheaper one (the least of a tie in cost).
  std::vector<StepPlan> out;  // descending whole step as the cost ascends
  size_t best = std::numeric_limits<size_t>::max();
  for (size_t i = 0; i < all.size();) {
    size_t j = i;  // [i, j): plans of one cost; the least whole step of them, the first on a tie
    Candidate* least = nullptr;
    for (; j < all.size() && plan_cost(all[j].plan) == plan_cost(all[i].plan); ++j) {
      Candidate& c = all[j];
      if (c.plan.step.peak_total < best && (!least || c.plan.step.peak_total < least->plan.step.peak_total)) least = &c;
    }
    if (least) {
      best = least->plan.step.peak_total;
      out.push_back(std::move(least->plan));
    }
    i = j;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

}  // namespace remat
