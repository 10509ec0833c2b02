// The frontier `remat plan` prints and draws: of the plans a whole-step budget chooses among (those of
// plan_for_budget: each kernel's optimal frontier and its finer frontiers, and the textbook strategies
// under every policy), each priced by the dry run of its whole step, the plans no other plan beats on
// both whole-step peak (StepPlan::step.peak_total) and cost (plan_cost). The DP's frontier is Pareto
// in activation bytes; a budget counts the whole step, and the two orders differ (a plan that holds
// more activations can peak lower overall), so the frontier shown is computed on what it plots.
#pragma once
#include <vector>

#include "planner/budget.h"

namespace remat {

// Ascending whole-step peak and descending cost: for every budget, plan_for_budget's plan costs what
// the last plan here that fits costs, and when none fits, the first plan here is the least whole-step
// peak it names. Of plans equal on both, one is kept (the DP's own, named by what it does).
std::vector<StepPlan> step_frontier(const PlanTarget& t, const std::vector<KernelPlans>& kernels);

}  // namespace remat
