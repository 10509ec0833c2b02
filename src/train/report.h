// The memory / compute report of a run: what was predicted beside what was measured.
#pragma once
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "checkpoint/schedule.h"
#include "core/allocator.h"
#include "model/model.h"
#include "step/step.h"
#include "train/trainer.h"

namespace remat {

struct ReportInput {
  const Model* model = nullptr;  // naming, and the dry run the predictions read
  int64_t micro_batch = 0, T = 0, accum = 1;
  StrategySpec strategy;
  StepMeasure measure;  // one optimizer step (all micro-batches)
  const autograd::Policy* policy = nullptr;  // a named-tensor policy, if any
  std::string policy_label = "none";
  // Measured wall time of one optimizer step (seconds, median over `timed_steps` steps): of
  // store-everything (strategy none, no policy) and of this run's own strategy and policy, timed the
  // same way on the same batches (compare_against_none, `remat train --compare-none`). Without the
  // store-everything time the headline says how to measure it; the FLOP count is never passed off
  // as a time.
  std::optional<double> store_all_step_s{}, step_s{};
  int timed_steps = 0;
  std::optional<size_t> store_all_peak_measured{};  // store-everything's measured activation peak
  std::string compare_note{};  // why --compare-none could not time the steps, if it could not
  // The allocator's per-name statistics as the run left them (compare_against_none takes them before
  // it runs other steps); unset: Allocator::global()'s when the report is made.
  std::optional<std::map<std::string, NameStats>> names{};
  // The schedule the run ran when it is not `strategy`'s (a plan's), and a policy per block overriding
  // `policy` for the blocks (StepOptions::block_policy): the predictions then price these.
  std::optional<Schedule> schedule{};
  std::vector<const autograd::Policy*> block_policy{};
  // A plan's attention kernel per block (StepOptions::block_attention), or empty.
  std::vector<autograd::AttentionKind> block_attention{};
};

// The report's input for a trainer's run: its model, micro-batch, T, accumulation, strategy, policy,
// schedule and per-block policies (a plan's, labelled "per block: ..."), and the last step's measure
// (with the whole-step prediction run() put beside it).
ReportInput report_input(const Trainer& t, const TrainSummary& s);

// The textbook overhead of a strategy (block units, fwd = 1, bwd = 2, every segment recomputed):
// none 1, segments 4/3, all (3L + L(L+1)/2) / 3L.
double textbook_overhead(const StrategySpec& s, int L);

// The counted FLOP overhead of a step: (fwd + bwd + recompute) / (fwd + bwd).
double flop_overhead(const autograd::Counters& c);

// The answer first, in one line: "activations X MiB instead of Y MiB (-Z%), step time +W% against
// store-everything", X the run's measured activation peak, Y the dry run's prediction for
// store-everything (strategy none, no policy), W from the measured step times (or, without them,
// how to measure them), followed by where each figure comes from.
std::string report_headline(const ReportInput& in);

// Multi-line text: the headline; bytes per category (each at its own peak in the step) and their
// joint peak; the activation peak measured vs predicted, with each part's own peak (boundaries,
// in-flight recompute, saved by the forward); per-layer measured vs analytic activation bytes; one
// block's saved tensors; the largest named activations; block forwards / recomputes / backwards with
// FLOPs and overhead, and the measured step times when present.
// With the measure's whole_step prediction (Trainer::run makes it), each category shows measured and
// predicted, followed by whole_step_agreement(); with its untracked_heap, the heap outside the
// allocator.
std::string memory_report(const ReportInput& in);
// "predicted = measured, to the byte", or "predicted - measured: gradient +128 B, total +128 B".
std::string whole_step_agreement(const StepMemory& predicted, const StepMeasure& measured);
nlohmann::json report_json(const ReportInput& in);

// Median wall time of `timed` optimizer steps, after `warmup` untimed ones, of two fresh Trainers
// built from `run`'s options: one with strategy none and no policy, one with run's own strategy and
// policy. Both take steps 0, 1, ... of run's seed (the same batches). Nothing is written or printed
// (no --save, checkpoint, metrics or sample), and no other trainer is touched. Throws remat::Error as
// Trainer does (store-everything over --memory-limit, for one), and when run.stop is raised.
struct StepTiming {
  double store_all_s = 0, run_s = 0;
  size_t store_all_peak_activation = 0;
  int timed = 0;
};
StepTiming time_against_none(const TrainOptions& run, int timed = 3, int warmup = 1);

// `remat train --compare-none`: takes the allocator's per-name statistics into `in` (so that the
// report describes the run, not the timing steps), then time_against_none into `in`. A failure to
// time (an Error, out of memory) becomes in.compare_note instead of an exception: the run and its
// report stand. Says on stderr what it times unless `run.quiet`.
void compare_against_none(ReportInput& in, const TrainOptions& run, int timed = 3);

}  // namespace remat
