// Plans under a byte budget. Candidates are `none`, `all`, and every partition made of a tail of
// length t (kept live, never recomputed) after K-1 near-equal checkpointed segments, for all K and t:
// O(L^2) schedules, each priced by simulation. The frontier is the Pareto set of (peak activation
// bytes, recompute FLOPs); the plan for a budget is the least recompute that fits.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "planner/planner.h"

namespace remat::planner {

struct Plan {
  StrategySpec spec;           // segments are explicit: label() is a valid --recompute value
  MemoryPrediction memory;
  ComputePrediction compute;
};

// Pareto-optimal plans, ascending in memory (descending in recompute).
std::vector<Plan> frontier(const StepTrace& trace);
// The plan with the least recompute whose predicted peak activation fits `budget_bytes`. Throws
// remat::Error naming the minimum when nothing fits.
Plan best_plan(const StepTrace& trace, size_t budget_bytes);

}  // namespace remat::planner
