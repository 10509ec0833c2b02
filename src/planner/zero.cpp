#include "planner/zero.h"

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
  if (stage > 1) return std::nullopt;
  Allocator acct(/*track_names=*/false);
  ShapeOnlyScope dry;
  DryRunAccount count(acct);
  const auto model = make_model(cfg);
  std::vector<Tensor> m, v;
  // The last rank's chunks are the largest (chunk r is [n r / N, n (r + 1) / N)).
  make_adamw_moments(*model, &m, &v, stage == 1 ? Shard{ranks - 1, ranks} : Shard{});
  return RankModelState{acct.active(Category::Parameter), acct.active(Category::Gradient),
                        acct.active(Category::OptimizerState)};
}

}  // namespace remat::planner
