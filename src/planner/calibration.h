// The time model that holds: seconds of a step's parts, measured on this machine (planner/calibrate.h,
// `remat calibrate`), kept in a small versioned JSON file, and the step time of any schedule priced
// from them by walking its actions.
//
// Why not FLOPs. A FLOP of a replayed block costs less than a FLOP of store-everything's first
// forward: `none` streams every block's saves to DRAM in the forward and reads them back in the
// backward, while a replayed block's tensors are consumed by its backward right away, from cache.
// Attention, softmax and the elementwise ops are bound by memory bandwidth, not FLOPs. So each block
// action is priced by what it does and where its data come from:
//   - a first-pass forward that keeps nothing (or only its input, as a checkpoint);
//   - a first-pass forward that keeps its internals under a policy (store-everything, selective, ...);
//   - a replay that keeps nothing (or only its input), and one that keeps its internals;
//   - a backward of internals kept since the first pass, and one of internals just replayed (the
//     policy's rebuilds included in both);
//   - freeing a checkpoint;
// and the parts outside the chain (embedding, head, the optimizer and the rest of the step) as fixed
// terms. All are medians over blocks and repeats. The FLOP count (planner.h: predict_compute) stays
// beside it.
#pragma once
#include <string>
#include <vector>

#include "planner/optimal.h"

namespace remat::planner {

struct Calibration {
  static constexpr int kVersion = 2;  // of its file; 1 did not record the precision

  // What it was measured for: a calibration prices only this model, micro-batch, sequence length and
  // thread count (check_calibration).
  ModelConfig cfg;
  int64_t B = 0, T = 0;
  int threads = 0;
  int repeats = 0;  // timed steps per calibration schedule
  // What the seconds are: "wall" time, or the process's "cpu" time (every thread's, so about threads x
  // wall on an idle machine; on a loaded one it leaves out the time other processes took).
  std::string clock = "wall";

  // Seconds per step, outside the chain.
  double embed_forward = 0, head_forward = 0, head_backward = 0, embed_backward = 0;
  double rest = 0;  // the rest of a training step: zeroing gradients, the gradient norm, AdamW

  // Seconds per block action.
  double forward_pass = 0;    // first pass, keeping nothing or only the block's input
  double recompute_pass = 0;  // a replay keeping nothing or only the block's input
  double free_checkpoint = 0;
  struct PolicyCosts {
    std::string name;              // "none" (keep everything), or a policy preset of the model
    double forward_store = 0;      // first pass keeping the internals under this policy
    double recompute_store = 0;    // a replay keeping the internals
    double backward_stored = 0;    // backward of internals kept since the first pass (rebuilds included)
    double backward_replayed = 0;  // backward of internals recorded by a replay
    template <class S, class V>
    static void fields(S& s, V&& v) {
      v("name", s.name), v("forward_store", s.forward_store), v("recompute_store", s.recompute_store);
      v("backward_stored", s.backward_stored), v("backward_replayed", s.backward_replayed);
    }
    bool operator==(const PolicyCosts&) const = default;
  };
  std::vector<PolicyCosts> policies;

  // Every field, as the file names it (record.h: its one codec).
  template <class S, class V>
  static void fields(S& s, V&& v) {
    v("model", s.cfg), v("batch", s.B), v("seq", s.T), v("threads", s.threads), v("repeats", s.repeats);
    v("clock", s.clock), v("embed_forward", s.embed_forward), v("head_forward", s.head_forward);
    v("head_backward", s.head_backward), v("embed_backward", s.embed_backward), v("rest", s.rest);
    v("forward_pass", s.forward_pass), v("recompute_pass", s.recompute_pass), v("free_checkpoint", s.free_checkpoint);
    v("policies", s.policies);
  }
  bool operator==(const Calibration&) const = default;

  // The index of a calibrated policy; throws remat::Error naming the calibrated ones.
  int policy_index(const std::string& name) const;
  // Seconds of one step outside the chain: embedding, head and rest.
  double fixed() const { return embed_forward + head_forward + head_backward + embed_backward + rest; }
};

// The file: JSON with a format tag and version, then every field (Calibration::fields).
std::string calibration_json(const Calibration& c);
// Parses calibration_json's text; `source` names it in errors. Throws remat::Error("calibration")
// for anything that is not such a file of this version, or holds a negative or non-finite time.
Calibration parse_calibration(const std::string& text, const std::string& source);
void save_calibration(const Calibration& c, const std::string& path);  // atomically
Calibration load_calibration(const std::string& path);
// Throws remat::Error("calibration") naming, in one line, every difference between what `c` was
// measured for and this run (a config field, its precision included, B, T, the thread count or the
// clock), with the command that measures it anew.
void check_calibration(const Calibration& c, const ModelConfig& cfg, int64_t B, int64_t T, int threads,
                       const std::string& clock, const std::string& source);

struct TimePrediction {
  double step = 0;   // seconds of one training step
  double fixed = 0;  // embedding, head and rest: the same under every schedule
  double forward = 0, recompute = 0, backward = 0, free = 0;  // the chain's actions, by kind
  int stored_backwards = 0, replayed_backwards = 0;
};
// The step time of `s` with block i's internals kept under cal.policies[block_policy[i]] (one entry
// per block; an empty list means policy 0 for every block).
TimePrediction predict_time(const Calibration& cal, const Schedule& s, const std::vector<int>& block_policy = {});
// Calibration indices for policies given by name (one per name; throws naming a missing one).
std::vector<int> calibration_indices(const Calibration& cal, const std::vector<std::string>& names);

// The seconds of one optimizer step of `accum` micro-batches, each priced by `t` (a step of one
// micro-batch): the chain, the embedding and the head run per micro-batch, `rest` once.
double optimizer_step_seconds(const Calibration& cal, const TimePrediction& t, int64_t accum);

// The calibration as the DP's TimeModel, for the DP's candidate policies `policy_names` (throws naming
// one that was not calibrated): every block action priced by its own term, fixed = cal.fixed(), so
// schedule_time() of any schedule is predict_time()'s step, and the DP minimises it.
TimeModel calibrated_time(const Calibration& cal, const std::vector<std::string>& policy_names);
// The DRAM premium of policy p (seconds per block): what keeping a block's internals and running their
// backward costs in the first pass above the same in a replay,
//   (forward_store - forward_pass + backward_stored) - (recompute_store - recompute_pass + backward_replayed).
// A FLOP count sees none; the DP, with calibrated_time, prices it.
double store_premium(const Calibration& cal, int p);

}  // namespace remat::planner
