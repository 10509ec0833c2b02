// The planner: what a step saves and costs, read from a dry run of the model's own forward code, and
// the memory and FLOPs of any schedule over it, by simulation. It runs no kernel and allocates no
// tensor memory, so it scales to models this machine cannot train (LLaMA-70B, GPT-3's 96 layers).
//
// The dry run (trace_step) pushes the real ops through with shape-only tensors (core/tensor.h): every
// saved tensor's name, shape and bytes, which ops hold it (its lifetime), what a policy drops and the
// recipe that rebuilds it, and every op's forward and backward FLOPs come from the same code that
// trains. Nothing here restates what a model saves. The training step measures the same quantities
// with the accounting allocator; tests hold prediction and measurement equal to the byte.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/schedule.h"
#include "model/model.h"

namespace remat::planner {

// One op of a dry run, in forward order.
struct OpRecord {
  std::string name, op;  // the op's name as the model gives it, and its kind ("linear")
  double fwd_flops = 0, bwd_flops = 0;
  double rebuild_flops = 0;  // recipes run in this op's backward (tensors the policy dropped)
};

// A tensor some op saves for its backward.
struct TensorRecord {
  std::string name;  // as the model names it
  Shape shape;
  size_t bytes = 0;
  std::vector<int> holders;               // ops (indices into the part's ops) whose backward needs it
  bool input = false;                     // the part's input (x_i for block i, x_L for the head)
  Category category = Category::SavedActivation;  // as the op's save tagged it
  std::vector<std::string> rebuilt_from;  // dropped tensors: the kept tensors its recipe reads
  double rebuild_flops = 0;               // ... and what one rebuild costs
};

// What one part of the model (the embedding, block i, the head) saves and costs under a policy.
struct PartTrace {
  std::string name;                  // "embedding", "head", or block i's prefix without the dot
  std::vector<OpRecord> ops;
  std::vector<TensorRecord> kept;    // distinct storages its ops hold, in the order first saved
  std::vector<TensorRecord> dropped; // what the policy dropped: rebuilt in each holder's backward
  size_t kept_bytes() const;
  size_t input_bytes() const;
  double fwd_flops() const;
  double bwd_flops() const;
  double rebuild_flops() const;  // per backward of this part
};

struct StepTrace {
  ModelConfig cfg;
  int64_t B = 0, T = 0;
  PartTrace embed, head;
  std::vector<PartTrace> blocks;
  size_t boundary_bytes = 0;  // |x|: one block boundary (block 0's input)
};

// Dry-runs model.embed, every block and the head for a (B, T) micro-batch under `policy` (which may be
// null: keep everything), block i's attention run by block_attention[i] (empty: the model's kernel on
// every block; else one per block, as StepOptions::block_attention). Throws as the runtime does when a
// strict policy drops what nothing rebuilds.
StepTrace trace_step(const Model& model, int64_t B, int64_t T, const autograd::Policy* policy = nullptr,
                     const std::vector<autograd::AttentionKind>& block_attention = {});
// A model of `cfg` with shape-only parameters, for tracing models too large to hold.
std::unique_ptr<Model> shape_only_model(const ModelConfig& cfg);

struct MemoryPrediction {
  size_t peak_activation = 0;  // max over the step of saved + checkpoint + recompute
  size_t peak_saved = 0, peak_checkpoint = 0, peak_recompute = 0;  // each category's own peak
  size_t forward_end = 0;      // held when the forward (head included) ends
  size_t boundary_bytes = 0;   // |x|: one block boundary
  size_t block_bytes = 0;      // block 0's internals (its saves, input included)
};
// The activation level (saved + checkpoint + recompute) before each action of a schedule, and before
// the head: what the whole-step model (planner/whole_step.h) adds each action's own bytes to.
struct ActionLevels {
  std::vector<size_t> before;  // [k]: before action k
  size_t before_head = 0;      // after the forward phase, before the head's saves
};
MemoryPrediction simulate_memory(const StepTrace& trace, const Schedule& s, ActionLevels* levels = nullptr);

// One block's part of the simulation: bytes kept (its input among them), bytes freed after each op's
// backward (by the earliest-in-forward holder, which is the last node to release it; the input x_i
// apart) and bytes rebuilt during each. Precomputed once per (block, policy) by callers that simulate
// many plans over the same candidates.
struct BlockMemory {
  size_t kept = 0, input = 0;
  int input_op = 0;  // the input is released with its earliest holder too, unless it is a boundary
  std::vector<size_t> freed, rebuilt;
};
BlockMemory block_memory(const PartTrace& p);
// simulate_memory over block i = *blocks[i], |x| = x, the embedding's and the head's kept bytes.
MemoryPrediction simulate_memory(const std::vector<const BlockMemory*>& blocks, size_t x, size_t emb, size_t head,
                                 const Schedule& s, ActionLevels* levels = nullptr);

// The FLOPs of a schedule: predict_compute (planner/pricing.h).

}  // namespace remat::planner
