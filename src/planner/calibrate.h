// Measuring the time model (planner/calibration.h) on this machine, and timing whole training steps
// of any schedule with a policy per block: the engine of `remat calibrate` and of `remat bench
// --time-model`.
//
// How it measures. Every action of a step is timed on its own: the step's event hook (StepOptions::
// trace, one event after the embedding, after each of the executor's actions, after the head's
// forward and backward, and after the embedding's backward) is timestamped, so one step yields the
// seconds of each block action in its context. No system of equations is solved: a store-everything
// step gives the first-pass store forwards and the backwards of stored internals; a segmented step
// with every segment replayed gives the first-pass forwards that keep nothing, the pass replays, the
// replays that record internals and their backwards. Both run under each calibrated policy, the
// schedules interleaved round by round so that the machine's drift reaches them alike, and each term
// is the median over blocks and timed rounds.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "planner/calibration.h"
#include "step/step.h"

namespace remat {

// What a StepTimer reads: wall time, or the process's CPU time (every thread's), which on a loaded
// machine leaves out the time other processes took.
enum class StepClock { Wall, Cpu };
const char* clock_name(StepClock c);         // "wall" | "cpu"
StepClock parse_clock(const std::string& s);  // throws remat::Error naming both

// A model of `cfg` (initialised from `seed`), one micro-batch of B uniform random tokens, and AdamW's
// moments: runs whole training steps -- zero the gradients, forward_backward, the gradient norm,
// clipping and AdamW, as Trainer::step does -- under any StepOptions, timing each event.
class StepTimer {
 public:
  StepTimer(const ModelConfig& cfg, int64_t B, int64_t T, uint64_t seed, StepClock clock = StepClock::Wall);
  ~StepTimer();
  StepTimer(const StepTimer&) = delete;
  StepTimer& operator=(const StepTimer&) = delete;

  struct Timing {
    double step = 0;  // seconds of the whole step, on the timer's clock
    double embed_forward = 0, head_forward = 0, head_backward = 0, embed_backward = 0;
    double rest = 0;             // the step minus everything else (zeroing, the norm, AdamW)
    std::vector<double> action;  // seconds of each action of the schedule, in order
  };
  // One step under `so` (its trace hook is taken over); `measure` as forward_backward's.
  Timing step(const StepOptions& so, StepMeasure* measure = nullptr);
  Model& model();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct CalibrateOptions {
  ModelConfig cfg;
  int64_t B = 8, T = 0;              // T = 0: the model's block size
  std::vector<std::string> policies;  // "none" and model presets; empty: none and every preset
  int repeats = 3, warmup = 1;        // timed and untimed rounds
  uint64_t seed = 1;
  StepClock clock = StepClock::Wall;
  std::function<void(const std::string&)> progress;  // one line per round, if set
};

// The schedules calibrate() runs under each policy: store everything, and a segmented schedule in
// which every segment is replayed (recompute-last) and some segment has two blocks or more.
std::vector<StrategySpec> calibration_strategies(int L);

// Measures the calibration of `o.cfg` at (o.B, o.T) with OpenMP's current thread count.
planner::Calibration calibrate(const CalibrateOptions& o);

}  // namespace remat
