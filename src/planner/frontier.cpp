#include "planner/frontier.h"

#include <algorithm>
#include <limits>
#include <string>
#include <unordered_set>

#include "core/error.h"

namespace remat {

std::vector<StepPlan> step_frontier(const PlanTarget& t, const std::vector<KernelPlans>& kernels) {
  REMAT_ASSERT(!kernels.empty() && !kernels.front().frontier.empty(), "step_frontier: no candidates");
  // Every plan plan_for_budget weighs (planner/budget.cpp, add_alternatives and the finer frontiers),
  // the DP's first, so that a tie keeps the plan named by what it does. Only the textbook strategies
  // are dry-run here; the DP's plans wait until they could be on the frontier.
  struct Candidate {
    StepPlan plan;
    bool priced = false;
  };
  std::vector<Candidate> all;
  for (const KernelPlans& kp : kernels) {
    for (const planner::ChainPlan& cp : kp.frontier) all.push_back({unpriced_plan(kp.candidates, cp, t)});
    for (const planner::ChainPlan& cp : kp.finer) all.push_back({unpriced_plan(kp.candidates, cp, t)});
  }
  for (const KernelPlans& kp : kernels) {
    const int L = int(kp.candidates.cfg.L);
    for (const std::string& policy : kp.candidates.problem.policy_names)
      for (const char* name : {"none", "all", "block", "sqrt"})
        for (bool last : {false, true})
          if (!(last && std::string(name) == "none"))
            all.push_back({price_strategy(kp.candidates, parse_strategy(name, L, last), policy, t), true});
  }
  // The same plan often comes twice (a finer frontier repeats the whole one's cheap end; a textbook
  // strategy is a DP plan): dry-run once, under its first name.
  {
    std::unordered_set<std::string> seen;
    std::vector<Candidate> once;
    for (Candidate& c : all) {
      std::string key = encode_schedule(c.plan.schedule) + "|" + attention_label(c.plan);
      for (const std::string& p : c.plan.block_policy) key += "|" + p;
      if (seen.insert(key).second) once.push_back(std::move(c));
    }
    all = std::move(once);
  }
  std::stable_sort(all.begin(), all.end(),
                   [](const Candidate& a, const Candidate& b) { return plan_cost(a.plan) < plan_cost(b.plan); });
  // What every plan holds (parameters, gradients, optimizer state, data) is live at its activation
  // peak, so it plus the activation peak bounds a plan's whole step from below: a plan whose bound is
  // no less than a cheaper plan's whole step cannot be on the frontier, and is not dry-run.
  const size_t persistent = price_plan(kernels.front().candidates, kernels.front().frontier.front(), t).step.persistent;
  std::vector<StepPlan> out;  // descending whole step as the cost ascends
  size_t best = std::numeric_limits<size_t>::max();
  for (size_t i = 0; i < all.size();) {
    size_t j = i;  // [i, j): plans of one cost; the least whole step of them, the first on a tie
    Candidate* least = nullptr;
    for (; j < all.size() && plan_cost(all[j].plan) == plan_cost(all[i].plan); ++j) {
      Candidate& c = all[j];
      if (persistent + c.plan.activation_peak >= best) continue;
      if (!c.priced) c.plan.step = dry_run_plan(c.plan, t.data_bytes), c.priced = true;
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
