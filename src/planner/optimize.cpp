#include "planner/optimize.h"

#include <algorithm>

#include "core/error.h"

namespace remat::planner {

namespace {
Plan price(const GPTConfig& cfg, int64_t B, int64_t T, StrategySpec s, const autograd::Policy* pol) {
  const Schedule sch = make_schedule(s, int(cfg.L));
  return {std::move(s), simulate_memory(cfg, B, T, sch, pol), predict_compute(cfg, B, T, sch, pol)};
}

std::vector<Plan> candidates(const GPTConfig& cfg, int64_t B, int64_t T, const autograd::Policy* pol) {
  const int L = int(cfg.L);
  std::vector<Plan> out;
  out.push_back(price(cfg, B, T, parse_strategy("none", L, false), pol));
  out.push_back(price(cfg, B, T, parse_strategy("all", L, false), pol));
  for (int tail = 1; tail < L; ++tail)
    for (int k = 1; k <= L - tail; ++k) {
      StrategySpec s;
      s.name = "segments";
      s.segments = uniform_segments(L - tail, k);
      s.segments.push_back(tail);
      out.push_back(price(cfg, B, T, s, pol));
      s.replay_internals = true;  // the other replay: more memory, less recompute
      if (k < L - tail) out.push_back(price(cfg, B, T, s, pol));
    }
  return out;
}
}  // namespace

std::vector<Plan> frontier(const GPTConfig& cfg, int64_t B, int64_t T, const autograd::Policy* pol) {
  std::vector<Plan> all = candidates(cfg, B, T, pol);
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

Plan best_plan(const GPTConfig& cfg, int64_t B, int64_t T, size_t budget, const autograd::Policy* pol) {
  std::vector<Plan> f = frontier(cfg, B, T, pol);
  const Plan* best = nullptr;  // ascending memory, descending recompute: the last that fits is the best
  for (const Plan& p : f)
    if (p.memory.peak_activation <= budget) best = &p;
  if (best) return *best;
  throw Error("planner",
              "budget " + format_bytes(budget) + " is below the minimum " + format_bytes(f.front().memory.peak_activation) +
                  " of activation memory for " + cfg.describe() + " at B=" + std::to_string(B) + ", T=" + std::to_string(T),
              "use a smaller batch (remat plan --batch, remat train --micro-batch) or --seq, a policy such as --policy selective, or raise the budget");
}

}  // namespace remat::planner
