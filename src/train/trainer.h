// The training loop: data, AdamW with warmup + cosine LR, grad-norm clipping, gradient accumulation
// over micro-batches, periodic validation, sampling, JSON-lines metrics, and weights on disk.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/policy.h"
#include "checkpoint/schedule.h"
#include "model/model.h"
#include "step/run_config.h"
#include "step/step.h"

namespace remat {

// The policy the options ask for, in the model's names: --save-only / --save-all-but / --policy, or a
// policy preset given as --recompute (then the strategy is `none`). Throws on conflicting requests,
// and on --save-only / --save-all-but names that select no tensor a block of this model saves
// (listing those names, from a dry run of the model).
NamePolicy policy_from(const struct TrainOptions& o, const Model& model, std::string* strategy);

// A run (RunConfig: what a checkpoint records) and how this process carries it out: outputs,
// progress, debugging switches and hooks, which change no bit of the results.
struct TrainOptions : RunConfig {
  int64_t eval_every = 50;     // 0 = never
  int64_t eval_batches = 8;
  int64_t sample_every = 0;    // 0 = only at the end (sample_tokens > 0)
  int64_t sample_tokens = 200;
  std::string save, init_from, metrics_out;
  DType save_dtype = DType::F32;  // --save-dtype: what --save writes (resume checkpoints keep the fp32 masters)
  bool check_determinism = false, break_replay = false;
  size_t memory_limit = 0;
  bool progress = true;
  // With progress on and stderr not a terminal: a progress line at least every this many seconds
  // (besides the eval lines); 0 = every step. On a terminal the line is rewritten every step.
  double progress_every = 10;
  bool quiet = false;
  // Data parallelism: start each block's gradient reduction as its backward ends (false: after the
  // whole backward; a benchmark's switch, no bit changes).
  bool overlap_reduction = true;
  // ZeRO-3: a block replayed before its backward, with other actions between, stays gathered until its
  // backward (true), or is freed and gathered again (false: less memory, more all-gathers). No bit changes.
  bool hold_gathers = true;
  autograd::OpProfile* profile = nullptr;  // per-op wall time of every step, if set

  // Runs that survive (run_state.h).
  std::string save_dir;        // checkpoints DIR/step-NNNNNN (every save_every steps, at the end, on a stop)
  std::string resume;          // a checkpoint folder (find_checkpoint) to continue from
  bool skip_nonfinite = false; // a step with a non-finite loss or gradient norm is skipped, not fatal
  // Polled between steps (never inside one), between validation batches and between sampled tokens:
  // non-zero stops the run there, with its weights (save) and a checkpoint (save_dir) written. The
  // signals that end a run set it (cmd_train).
  const std::atomic<int>* stop = nullptr;
  // Raised while a checkpoint is written, so that cmd_train lets the save finish before an exit.
  std::atomic<int>* saving = nullptr;
  // Called after every finished step (0-based index, mean loss); tests stop a run from here.
  std::function<void(int64_t step, float loss)> on_step;
};

struct TrainSummary {
  std::vector<float> losses, val_losses;
  float first_val = 0, last_val = 0;
  StepMeasure measure;         // of the last step
  double tokens_per_s = 0;
  std::string sample;
  int64_t start_step = 0;      // > 0 when resumed
  int64_t steps_done = 0;      // the step the run stopped at (== steps unless stopped)
  int64_t skipped = 0;         // steps skipped as non-finite (--skip-nonfinite), this run and before
  bool stopped = false;        // stopped early by *stop
  int stop_signal = 0;         // *stop's value then (the signal; under mpirun, the highest any rank got)
  bool saved = false;          // --save written
  std::string checkpoint;      // the last checkpoint written, or ""
};

class Trainer {
 public:
  explicit Trainer(const TrainOptions& opt);
  ~Trainer();
  TrainSummary run();
  Model& model();
  const Model& model() const;
  int64_t micro_batch() const;  // sequences per forward
  int64_t seq() const;          // T
  int64_t accum() const;        // micro-batches per optimizer step
  // Mean validation loss over eval_batches fixed windows.
  float validate();
  // Under ZeRO-3, every parameter whole on every rank (a collective: every rank calls it), for what
  // reads the whole model between steps; the next step shards them again. Else nothing.
  void whole_parameters();
  // Greedy-free sampling: temperature 1 with a fixed seed, byte-level text.
  std::string sample(int64_t tokens, uint64_t seed);
  // One optimizer step (all micro-batches); returns the mean loss. The global gradient norm is
  // computed every step (before clipping); when it or the loss is not finite, the update is not
  // applied (weights and moments untouched) and last_step_finite() is false.
  // `m` gets the whole step's peaks (every micro-batch and the optimizer update).
  float step(int64_t step, StepMeasure* m);
  double last_grad_norm() const;
  // Under data parallelism, the seconds the last step waited for gradient reductions after its
  // backward (what the backward did not hide); nullopt in one process.
  std::optional<double> last_reduce_wait_s() const;
  // Under ZeRO-3: the all-gathers of blocks' parameters the last step made on this rank, the bytes
  // they brought it, and the seconds it waited for them.
  struct Gathers {
    int64_t count = 0, bytes = 0;
    double wait_s = 0;
  };
  std::optional<Gathers> last_gathers() const;
  bool last_step_finite() const;
  // The first step run() runs: the checkpoint's step when resumed, else 0.
  int64_t start_step() const;
  // Writes a checkpoint of the current state, `step` steps done, into opt.save_dir (needs one), then
  // deletes this run's checkpoints beyond opt.keep (save_dir.h).
  std::string save_checkpoint(int64_t step);
  double lr_at(int64_t step) const;
  const StrategySpec& strategy() const;
  // What the data loader found, and what validates: "llm.c v2 token file 'x.bin' (1,234 uint32
  // tokens), train split (...); validation: ..., val split (...)".
  const std::string& data_description() const;
  // The named-tensor policy in force (keeps_all() when none).
  const NamePolicy& policy() const;
  // A plan's policy per block (TrainOptions::block_policy), or empty.
  const std::vector<NamePolicy>& block_policies() const;
  // The StepOptions step() runs with: the schedule and the policies (global and per block).
  StepOptions step_options() const;
  // What one step holds, every accounted byte per category at its peak, from a dry run of the step's
  // own code (dry_run_step with step_options(), the micro-batch, the accumulation and the data set's
  // accounted bytes): what step() measures, to the byte. Shape-only, so cheap. run() puts it in
  // TrainSummary::measure.whole_step, beside the measurement.
  StepMemory predicted_memory() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace remat
