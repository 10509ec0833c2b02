// Model state per rank under data parallelism: ZeRO's published accounting (Rajbhandari et al. 2020,
// section 3 and Figure 1) beside remat's own, from a dry run of what its trainer allocates.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>

#include "checkpoint/schedule.h"
#include "model/model.h"

namespace remat::planner {

// Bytes per device of ZeRO's mixed-precision Adam: fp16 parameters and gradients (2 + 2 bytes each)
// and K bytes of optimizer state (fp32 master weights, momentum and variance: K = 12), for `psi`
// parameters over `ranks` devices. Stage 0: (2 + 2 + K) psi; 1 (P_os): 4 psi + K psi / N; 2
// (P_os+g): 2 psi + (2 + K) psi / N; 3 (P_os+g+p): (2 + 2 + K) psi / N.
double zero_paper_bytes(double psi, int ranks, int stage, double K = 12);

// What remat's trainer holds per rank for the model (a dry run of the model and AdamW's moments, the
// rank with the largest chunks): fp32 master parameters (and, in bf16, a bf16 copy of each matrix),
// fp32 gradients, and AdamW's two fp32 moments, sharded under stage 1; under stage 3, the rank's chunks
// of all of them between steps (make_parameter_chunks), without the blocks' parameters and gradients
// it gathers while a step runs (the planner's dry run of the step prices those). Stage 2: nullopt (not
// supported by remat).
struct RankModelState {
  size_t parameters = 0, gradients = 0, optimizer = 0;
  size_t total() const { return parameters + gradients + optimizer; }
};
std::optional<RankModelState> remat_model_state(const ModelConfig& cfg, int ranks, int stage);

// ZeRO stage 3 gathers a block's parameters before each action that uses them. Following the
// schedule, a gather is needed at a block's forward, replay or backward unless the action before it
// that used parameters was the same block's (they are still there: a replay right before its
// backward, or the chain's last forward before its backward, the head between them having its own).
// `hold`: a block gathered in the backward phase keeps its parameters until its backward (the
// memory of the blocks held at once is the price) instead of gathering again. Counted per micro-batch.
struct GatherCount {
  int64_t forward = 0, backward = 0;
  int64_t held_peak = 0;  // with hold: the most blocks whose parameters are held at once (else 1)
};
GatherCount zero3_gathers(const Schedule& s, bool hold);

}  // namespace remat::planner
