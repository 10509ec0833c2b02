// One training micro-step under any checkpoint schedule: embedding, the chain of blocks run by the
// ChainExecutor, the head, then backward in reverse. Gradients accumulate into the model's grads.
#pragma once
#include <array>
#include <functional>
#include <memory>
#include <optional>
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

// What a whole training step holds, from a dry run of the step's own code (forward_backward over
// every micro-batch, with the model's parameters and gradients, AdamW's moments and the data
// buffers live): every accounted byte, per category, at its peak, with no memory and no kernel.
// The real step measures the same quantities with the accounting allocator; they agree to the byte.
struct StepMemory {
  std::array<size_t, kNumCategories> peak{};  // each category's own peak
  // ... and each (category, dtype)'s own peak: e.g. fp32 masters and bf16 matmul copies of the weights
  std::array<std::array<size_t, kNumDTypes>, kNumCategories> peak_by_dtype{};
  size_t peak_total = 0;                      // all categories together, at its highest
  size_t peak_activation = 0;                 // saved + checkpoint + recompute
  std::array<size_t, kNumDTypes> peak_activation_by_dtype{};  // ... split by dtype at that moment
  size_t persistent = 0;                      // parameters + gradients + optimizer state + data
  // The allocations the step itself makes (every micro-batch and the optimizer update; not the state
  // that outlives it): how many, and their bytes summed. Peaks can hide a short-lived buffer; these
  // cannot.
  uint64_t allocations = 0, allocated_bytes = 0;
};
struct StepMeasure {
  autograd::Counters counters;
  size_t peak_activation = 0;  // saved + checkpoint + recompute, at its highest
  std::array<size_t, kNumDTypes> peak_activation_by_dtype{};  // ... split by dtype at that moment
  std::array<std::array<size_t, kNumDTypes>, kNumCategories> peak_category_by_dtype{};
  size_t peak_saved = 0, peak_checkpoint = 0, peak_recompute = 0;
  size_t peak_total = 0;       // every category, process-wide accounting
  std::array<size_t, kNumCategories> peak_category{};  // each category's own peak
  double chain_forward_s = 0;  // wall time of the chain's forward phase (first pass only)
  size_t forward_end = 0;      // activation bytes held when the forward ends (what PyTorch's
                               // saved_tensors_hooks count sees); the peak may come later, in backward
  // What the accounting allocator `a` says now: its peaks since its last reset_peak(), per category,
  // activation parts and total, into this measure's peak fields (no counters).
  void take_peaks(const Allocator& a);
  void merge(const StepMeasure& o);  // max of peaks, sum of counters; the first whole_step kept
  // The prediction of this same step, when the trainer made one (Trainer::predicted_memory(), a dry
  // run of the step's own code): it travels with the measure so the report shows the two side by side.
  std::optional<StepMemory> whole_step;
  // Heap bytes outside the accounting allocator after the step (untracked_heap_bytes(): oneDNN's
  // primitive cache and scratchpad, the runtime), when the trainer took it: after its first step.
  std::optional<size_t> untracked_heap;
};

// A rank's share of the optimizer state under ZeRO stage 1 (Rajbhandari et al. 2020): chunk `rank`
// of `ranks` near-equal chunks of every parameter, elements [n * rank / ranks, n * (rank + 1) / ranks).
// Arithmetic only: the step layer knows no communication.
struct Shard {
  int rank = 0, ranks = 1;
  int64_t lo(int64_t n) const { return n * rank / ranks; }
  int64_t hi(int64_t n) const { return n * (rank + 1) / ranks; }
  bool whole() const { return ranks == 1; }
};

// What runs beside the step's own code in data parallelism (dist/): the gradient reduction, started
// as blocks' gradients complete, and ZeRO's gathers. The trainer calls it around its real step, and
// dry_run_step around its dry one (made inside the dry run, so its buffers are counted there).
struct StepExtension {
  virtual ~StepExtension() = default;
  virtual void before_step(const Schedule&) {}  // before the step's first micro-batch, with its schedule
  virtual void before_action(const Action&) {}
  virtual void after_action(const Action&) {}
  virtual void after_micro_batch() {}  // after each micro-batch's backward
  virtual void after_backward() {}     // after the last micro-batch: every gradient reduced
  virtual void after_update() {}       // after AdamW
  // ZeRO-3: this rank's chunk of every parameter (value, gradient and bf16 copy, flat, in the order of
  // model.params()), which AdamW updates in place of the model's; null while the model holds them.
  virtual std::vector<Param>* parameter_chunks() { return nullptr; }
};

struct StepOptions {
  Schedule schedule;
  bool check_determinism = false;
  bool break_replay = false;
  const autograd::Policy* policy = nullptr;
  std::vector<const autograd::Policy*> block_policy;  // per block, overriding `policy` (a plan's)
  // Per block, the attention kernel every forward of the block runs (a plan's); empty: the model's
  // cfg.attention on every block. Otherwise one entry per block.
  std::vector<autograd::AttentionKind> block_attention;
  std::function<void(const std::string& event)> trace;  // one line per event, if set
  autograd::OpProfile* profile = nullptr;                 // per-op wall time, if set
  // Called before and after each action of the chain (a dry run's probe of the memory each one takes).
  std::function<void(const Action&)> before_action, after_action;
  // Data parallelism (dist/): the optimizer state's shard, and the extension the dry run makes for
  // itself over the model it runs (null: one process, the whole state).
  Shard optimizer_shard;
  std::function<std::unique_ptr<StepExtension>(Model&)> make_extension;
};

// One rank's share of a data-parallel step, for the dry runs that price it (the planner's): the
// extension that adds the reduction's buffers and hooks (dist::DataParallel), and the rank's shard of
// AdamW's state. Empty: one process and the whole state.
struct RankShare {
  std::function<std::unique_ptr<StepExtension>(Model&)> make_extension;
  Shard optimizer_shard;
  // The extension holds bytes across actions (a reduction's buffers from a block's backward to the end
  // of the backward; ZeRO-3's gathered parameters and whole gradients), which a model of each action's
  // own bytes does not capture: the planner dry-runs a plan in full before it takes it.
  bool dry_run_each = false;
};

// A plan's policy per block, by the model's preset names ("none" keeps everything), and the
// pointers StepOptions::block_policy takes (null where a block keeps everything). The pointers point
// into `owned`, which must outlive them.
std::vector<NamePolicy> named_block_policies(const Model& model, const std::vector<std::string>& names);
std::vector<const autograd::Policy*> policy_pointers(const std::vector<NamePolicy>& owned);

// Forward + backward of one micro-batch. `count` is the number of target positions the loss mean
// divides by (B*T*micro_steps for gradient accumulation). Returns the (unscaled by count share) loss
// value of this micro-batch as the mean over its own positions.
float forward_backward(Model& model, const MicroBatch& mb, double count, const StepRng& rng, const StepOptions& opt,
                       StepMeasure* measure);

// `accum` micro-batches of (B, T); `data_bytes`: what the data set holds in the allocator
// (TokenDataset::buffer_bytes(); 0 for a memory-mapped token file). The micro-batch's own token
// buffers (BatchBuffers) are counted here, beside it.
StepMemory dry_run_step(const ModelConfig& cfg, int64_t B, int64_t T, int64_t accum, const StepOptions& opt,
                        size_t data_bytes);

// The bytes of a step that no checkpoint plan changes: the state the trainer holds across steps
// (parameters, gradients, AdamW's moments, the data set's `data_bytes` and one micro-batch's token
// buffers), from a dry run of the same code that makes them. It equals dry_run_step(...).persistent
// for any schedule and policy. A whole-step budget minus this is what activations, their gradients,
// transients and workspace may use together; the planner's activation-only budget (the DP's) is a
// part of that, and dry_run_step's peak_total says whether a plan's whole step fits.
size_t plan_independent_bytes(const ModelConfig& cfg, int64_t B, int64_t T, size_t data_bytes);

// The token buffers of one micro-batch, inputs and targets (B*T int32 each), as one allocation from
// the accounting allocator (Category::Data, "data.batch"). Made under a dry run (ShapeOnlyScope and
// DryRunAccount) they are counted by the dry run's allocator and hold no memory.
class BatchBuffers {
 public:
  BatchBuffers(int64_t B, int64_t T);
  ~BatchBuffers();
  BatchBuffers(const BatchBuffers&) = delete;
  BatchBuffers& operator=(const BatchBuffers&) = delete;
  int32_t* inputs() { return data_; }
  int32_t* targets() { return data_ ? data_ + n_ : nullptr; }
  // Spans over both buffers (empty in a dry run).
  MicroBatch micro_batch() const;
  static size_t bytes(int64_t B, int64_t T);

 private:
  int32_t* data_ = nullptr;
  Allocator* dry_ = nullptr;
  int64_t B_, T_;
  size_t n_;
};

// AdamW's state: the first and second moments of every parameter, zeroed (Category::OptimizerState,
// "<param>.adam_m" and "<param>.adam_v"), in the order of model.params(). Shape-only in a dry run.
// Under a shard (ZeRO-1), each moment holds the shard's chunk of its parameter, flat.
void make_adamw_moments(const Model& model, std::vector<Tensor>* m, std::vector<Tensor>* v, Shard shard = {});

// ZeRO-3's state of a rank between steps: the shard's chunk of every parameter, flat, in the order of
// model.params(): its fp32 master ("<param>.chunk", Category::Parameter), its gradient, zeroed
// ("<param>.grad_chunk"), and its bf16 copy where the parameter has one ("<param>.bf16_chunk").
// Shape-only in a dry run.
std::vector<Param> make_parameter_chunks(const Model& model, Shard shard);

struct AdamWSettings {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
  float clip = 1.0f;  // global gradient-norm clipping; 0 = off
};
// The global L2 norm of every parameter's gradient (before clipping); 0 in a dry run.
double grad_norm(const Model& model);
// Clips the gradients to s.clip (given their norm) and applies one AdamW update at 1-based step `t`
// with learning rate `lr`: no weight decay on 1-D parameters (biases, norm gains), as GPT-2 and LLaMA
// do. The trainer's optimizer step, run by dry_run_step too (no kernel there).
// Under a shard, only the shard's chunk of each parameter (and of its bf16 copy) is clipped and updated,
// with the shard's moments; element for element the same arithmetic as the whole update. With
// `chunks` (ZeRO-3: StepExtension::parameter_chunks()), the shard's chunks are those flat tensors
// instead of parts of the model's parameters.
void adamw_step(Model& model, std::vector<Tensor>& m, std::vector<Tensor>& v, const AdamWSettings& s, double norm,
                float lr, int64_t t, Shard shard = {}, std::vector<Param>* chunks = nullptr);

// Forward only, nothing recorded: the mean loss of the batch.
float evaluate_loss(const Model& model, const MicroBatch& mb);

}  // namespace remat
