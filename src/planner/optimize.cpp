#include "planner/optimize.h"

#include <algorithm>

#include "core/error.h"

namespace remat::planner {

namespace {
Plan price(const StepTrace& tr, StrategySpec s) {
  const Schedule sch = make_schedule(s, int(tr.blocks.size()));
  return {std::move(s), simulate_memory(tr, sch), predict_compute(tr, sch)};
}

std::vector<Plan> candidates(const StepTrace& tr) {
  const int L = int(tr.blocks.size());
  std::vector<Plan> out;
  out.push_back(price(tr, parse_strategy("none", L, false)));
  out.push_back(price(tr, parse_strategy("all", L, false)));
  for (int tail = 1; tail < L; ++tail)
    for (int k = 1; k <= L - tail; ++k) {
      StrategySpec s;
      s.name = "segments";
      s.segments = uniform_segments(L - tail, k);
      s.segments.push_back(tail);
      out.push_back(price(tr, s));
      s.replay_internals = true;  // the other replay: more memory, less recompute
      if (k < L - tail) out.push_back(price(tr, s));
    }
  return out;
}
}  // namespace

std::vector<Plan> frontier(const StepTrace& tr) {
  std::vector<Plan> all = candidates(tr);
  std::sort(all.begin(), all.end(), [](const Plan& a, const Plan& b) {
    if (a.memory.peak_activation != b.memory.peak_activation)
      return a.memory.peak_activation < b.memory.peak_activation;
    return a.compute.recompute < b.compute.recompute;
  });
  std::vector<Plan> f;
  for (Plan& p : all)
    if (f.empty() || p.compute.recompute < f.back().compute.recompute) f.push_back(std::move(p));
  return f;
}

Plan best_plan(const StepTrace& tr, size_t budget) {
  std::vector<Plan> f = frontier(tr);
  const Plan* best = nullptr;  // ascending memory, descending recompute: the last that fits is the best
  for (const Plan& p : f)
    if (p.memory.peak_activation <= budget) best = &p;
  if (best) return *best;
  throw Error("planner",
              "budget " + format_bytes(budget) + " is below the minimum " + format_bytes(f.front().memory.peak_activation) +
                  " of activation memory for " + tr.cfg.describe() + " at B=" + std::to_string(tr.B) + ", T=" +
                  std::to_string(tr.T),
              "use a smaller batch (remat plan --batch, remat train --micro-batch) or --seq, a policy such as --policy selective, or raise the budget");
}

}  // namespace remat::planner
