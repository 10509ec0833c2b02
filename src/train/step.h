// One training micro-step under any checkpoint schedule: embedding, the chain of blocks run by the
// ChainExecutor, the head, then backward in reverse. Gradients accumulate into the model's grads.
#pragma once
#include <array>
#include <functional>
#include <span>
#include <string>

#include "autograd/tape.h"
#include "checkpoint/executor.h"
#include "checkpoint/schedule.h"
#include "model/model.h"

namespace remat {

struct MicroBatch {
  std::span<const int32_t> inputs, targets;  // (B*T) each
  int64_t B = 0, T = 0;
};

struct StepMeasure {
  autograd::Counters counters;
  size_t peak_activation = 0;  // saved + checkpoint + recompute, at its highest
  size_t peak_saved = 0, peak_checkpoint = 0, peak_recompute = 0;
  size_t peak_total = 0;       // every category, process-wide accounting
  std::array<size_t, kNumCategories> peak_category{};  // each category's own peak
  double chain_forward_s = 0;  // wall time of the chain's forward phase (first pass only)
  size_t forward_end = 0;      // activation bytes held when the forward ends (what PyTorch's
                               // saved_tensors_hooks count sees); the peak may come later, in backward
  void merge(const StepMeasure& o);  // max of peaks, sum of counters
};

struct StepOptions {
  Schedule schedule;
  bool check_determinism = false;
  bool break_replay = false;
  const autograd::Policy* policy = nullptr;
  std::vector<const autograd::Policy*> block_policy;  // per block, overriding `policy` (a plan's)
  std::function<void(const std::string& event)> trace;  // one line per event, if set
  autograd::OpProfile* profile = nullptr;                 // per-op wall time, if set
};

// Forward + backward of one micro-batch. `count` is the number of target positions the loss mean
// divides by (B*T*micro_steps for gradient accumulation). Returns the (unscaled by count share) loss
// value of this micro-batch as the mean over its own positions.
float forward_backward(Model& model, const MicroBatch& mb, double count, const StepRng& rng, const StepOptions& opt,
                       StepMeasure* measure);

// What a whole training step holds, from a dry run of the step's own code (forward_backward over
// every micro-batch, with the model's parameters and gradients, AdamW's moments and the data
// buffers live): every accounted byte, per category, at its peak, with no memory and no kernel.
// The real step measures the same quantities with the accounting allocator; they agree to the byte.
struct StepMemory {
  std::array<size_t, kNumCategories> peak{};  // each category's own peak
  size_t peak_total = 0;                      // all categories together, at its highest
  size_t peak_activation = 0;                 // saved + checkpoint + recompute
  size_t persistent = 0;                      // parameters + gradients + optimizer state + data
};
// `accum` micro-batches of (B, T); `data_bytes`: what the data set holds in the allocator.
StepMemory dry_run_step(const ModelConfig& cfg, int64_t B, int64_t T, int64_t accum, const StepOptions& opt,
                        size_t data_bytes);

// Forward only, nothing recorded: the mean loss of the batch.
float evaluate_loss(const Model& model, const MicroBatch& mb);

}  // namespace remat
