#include "planner/zero.h"

#include <algorithm>
#include <vector>

#include "core/allocator.h"
#include "core/error.h"
#include "core/tensor.h"
#include "step/step.h"

namespace remat::planner {

double zero_paper_bytes(double psi, int ranks, int stage, double K) {
  REMAT_ASSERT(ranks >= 1 && stage >= 0 && stage <= 3, "zero_paper_bytes: ranks >= 1, stage 0..3");
  const double N = ranks;
  switch (stage) {
    case 0: return (2 + 2 + K) * psi;
    case 1: return (2 + 2) * psi + K * psi / N;
    case 2: return 2 * psi + (2 + K) * psi / N;
    default: return (2 + 2 + K) * psi / N;
  }
}

std::optional<RankModelState> remat_model_state(const ModelConfig& cfg, int ranks, int stage) {
  if (stage == 2) return std::nullopt;
  Allocator acct(/*track_names=*/false);
  ShapeOnlyScope dry;
  DryRunAccount count(acct);
  const auto model = make_model(cfg);
  // The last rank's chunks are the largest (chunk r is [n r / N, n (r + 1) / N)).
  const Shard shard = stage == 0 ? Shard{} : Shard{ranks - 1, ranks};
  std::vector<Tensor> m, v;
  make_adamw_moments(*model, &m, &v, shard);
  std::vector<Param> chunks;
  if (stage == 3) {  // between steps a rank holds its chunks and nothing whole, as dist::DataParallel does
    chunks = make_parameter_chunks(*model, shard);
    for (Param& q : model->params())
      for (Tensor* t : {&q.value, &q.grad, &q.lowp})
        if (t->defined()) t->evict();
  }
  return RankModelState{acct.active(Category::Parameter), acct.active(Category::Gradient),
                        acct.active(Category::OptimizerState)};
}

GatherCount zero3_gathers(const Schedule& s, bool hold) {
  GatherCount c;
  c.held_peak = 1;
  int last = -1;           // the block of the last action that used parameters
  bool backward = false;   // past the first forward phase (replays and backwards)
  std::vector<int> held;   // hold: blocks gathered in the backward phase, until their backward
  for (const Action& a : s) {
    if (a.kind == Action::Kind::Free) continue;
    if (a.recompute || a.kind == Action::Kind::Backward) backward = true;
    const bool there = a.block == last || (hold && std::find(held.begin(), held.end(), a.block) != held.end());
    if (!there) {
      (backward ? c.backward : c.forward) += 1;
      if (hold && backward) held.push_back(a.block);
    }
    if (hold) c.held_peak = std::max<int64_t>(c.held_peak, int64_t(held.size()));
    if (a.kind == Action::Kind::Backward) std::erase(held, a.block);
    last = a.block;
  }
  return c;
}

}  // namespace remat::planner
