// The planner: the activation table (name, shape, bytes) of a GPT config, and the memory and FLOPs of
// any schedule over it, by simulation. It runs nothing, so it scales to models we cannot run.
// The training step measures the same quantities with the accounting allocator; tests hold the two
// equal to the byte.
#pragma once
#include <string>
#include <vector>

#include "checkpoint/schedule.h"
#include "model/gpt.h"

namespace remat::planner {

struct TensorSpec {
  std::string name;  // "h.3.attn.probs"
  Shape shape;
  size_t bytes = 0;
  std::vector<int> holders;          // forward indices of the ops whose backward needs it
  std::vector<std::string> rebuilt_from;  // a policy may drop it: its producer rebuilds it from these
  double rebuild_flops = 0;
};

// The ops of a block, in forward order (holders index this list).
const std::vector<std::string>& block_ops();

// What block i saves under store-everything, its input x_i first.
std::vector<TensorSpec> block_table(const GPTConfig& cfg, int64_t B, int64_t T, int i);

// A block's saved tensors under a policy: kept (with their holders, recipe inputs included) and
// dropped (rebuilt during the backward of each holder). Throws as the runtime does when a strict
// policy drops a tensor nothing can rebuild.
struct PolicyTable {
  std::vector<TensorSpec> kept, dropped;
  size_t kept_bytes() const;
};
PolicyTable apply_policy(const std::vector<TensorSpec>& table, const autograd::Policy* policy);
// What the head (ln_f, LM head, loss) saves, x_L first.
std::vector<TensorSpec> head_table(const GPTConfig& cfg, int64_t B, int64_t T);
size_t total_bytes(const std::vector<TensorSpec>& t);

struct MemoryPrediction {
  size_t peak_activation = 0;  // max over the step of saved + checkpoint + recompute
  size_t peak_saved = 0, peak_checkpoint = 0, peak_recompute = 0;  // each category's own peak
  size_t forward_end = 0;      // held when the forward (head included) ends
  size_t boundary_bytes = 0;   // |x|: one block boundary
  size_t block_bytes = 0;      // one block's internals (store-everything, input included)
};
MemoryPrediction simulate_memory(const GPTConfig& cfg, int64_t B, int64_t T, const Schedule& s,
                                 const autograd::Policy* policy = nullptr);

struct ComputePrediction {
  double fwd = 0, bwd = 0, recompute = 0;  // FLOPs of one step
  int block_forwards = 0, block_recomputes = 0;
  // (fwd + bwd + recompute) / (fwd + bwd): the spec's "+33%" is 1.33.
  double overhead() const { return (fwd + bwd + recompute) / (fwd + bwd); }
  // Forward-equivalents: (fwd + bwd + recompute) / fwd.
  double forward_equivalents() const { return (fwd + bwd + recompute) / fwd; }
};
ComputePrediction predict_compute(const GPTConfig& cfg, int64_t B, int64_t T, const Schedule& s,
                                   const autograd::Policy* policy = nullptr);

// FLOPs of one block's forward and backward, and of the embedding + head, as the ops count them.
struct BlockFlops {
  double block_fwd = 0, block_bwd = 0, head_fwd = 0, head_bwd = 0;
};
BlockFlops flops(const GPTConfig& cfg, int64_t B, int64_t T);

}  // namespace remat::planner
