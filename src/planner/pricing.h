// One walk prices a schedule. A TimeModel gives the cost of each block action (FLOPs from the dry
// run, or seconds from a calibration); price_schedule walks the actions once and returns the total
// and its parts. The FLOP count (predict_compute), the calibrated step time (predict_time) and the
// DP's objective (schedule_time) are this walk under one model or the other, so they cannot disagree
// on what a schedule does.
#pragma once
#include <functional>
#include <vector>

#include "planner/planner.h"

namespace remat::planner {

// Predicted seconds (or any additive cost) of each block action, as planner/calibration.h prices
// them: what a forward costs depends on what it keeps and on whether it is the first pass (which
// streams its saves to DRAM) or a replay in the backward phase (which runs from cache), and what a
// backward costs depends on whether its internals were kept since the first pass or just recorded by
// a replay. The DP's recursion separates the two passes already (before the head every forward is a
// first pass, after it every forward is a replay), so it prices each action by its own term and
// minimises exactly schedule_time() below.
struct TimeModel {
  // Block i's forward keeping nothing or only its input (a checkpoint): first pass, replay.
  std::function<double(int i)> forward_pass, recompute_pass;
  // Block i's forward keeping its internals under policy p: first pass, replay.
  std::function<double(int i, int p)> forward_store, recompute_store;
  // Block i's backward under policy p: of internals kept since the first pass, of internals a replay
  // recorded. A calibration's terms include the rebuilds of what p dropped.
  std::function<double(int i, int p)> backward_stored, backward_replayed;
  // The rebuilds of what p dropped, in block i's backward, when counted apart (FLOPs: the recompute
  // they are); null when the backward terms include them (a calibration measures them together).
  std::function<double(int i, int p)> rebuild;
  std::function<double(int i)> free_checkpoint;  // dropping block i's checkpoint
  double fixed = 0;  // the step outside the chain (embedding, head, ...): the same under every schedule
  bool valid() const {
    return forward_pass && recompute_pass && forward_store && recompute_store && backward_stored &&
           backward_replayed && free_checkpoint;
  }
  bool empty() const {
    return !forward_pass && !recompute_pass && !forward_store && !recompute_store && !backward_stored &&
           !backward_replayed && !rebuild && !free_checkpoint;
  }
};

// The FLOP count as the cost: fwd for every forward, bwd for every backward and its rebuilds apart, a
// free costs nothing; fixed: the embedding's and the head's FLOPs. It refers to `traces` (one per
// candidate policy, as PlanProblem::traces).
TimeModel flop_time(const std::vector<StepTrace>& traces);

// A schedule priced action by action.
struct ScheduleCost {
  double total = 0;  // fixed, then every action's cost added in schedule order
  double fixed = 0;
  double forward = 0, recompute = 0;  // the chain's forwards: first pass, replays
  double backward = 0;                // backwards (a calibration's include their rebuilds)
  double rebuild = 0;                 // rebuilds counted apart (TimeModel::rebuild)
  double free = 0;
  int block_forwards = 0, block_recomputes = 0;
  int stored_backwards = 0, replayed_backwards = 0;
};
// Schedule `s` with block i under block_policy[i] (empty: policy 0 on every block). A block's backward
// is "replayed" when its latest forward keeping internals was a recompute.
ScheduleCost price_schedule(const TimeModel& tm, const Schedule& s, const std::vector<int>& block_policy);
// Its total: what the DP minimises (ChainPlan::time of a plan it returns).
double schedule_time(const TimeModel& tm, const Schedule& s, const std::vector<int>& block_policy);

struct ComputePrediction {
  double fwd = 0, bwd = 0, recompute = 0;  // FLOPs of one step
  int block_forwards = 0, block_recomputes = 0;
  // (fwd + bwd + recompute) / (fwd + bwd): the textbook "+33%" is 1.33.
  double overhead() const { return (fwd + bwd + recompute) / (fwd + bwd); }
  // Forward-equivalents: (fwd + bwd + recompute) / fwd.
  double forward_equivalents() const { return (fwd + bwd + recompute) / fwd; }
};
// The FLOPs of `s` over `trace`: price_schedule under flop_time({trace}), the embedding's and the
// head's FLOPs added to fwd and bwd; replays and rebuilds are the recompute.
ComputePrediction predict_compute(const StepTrace& trace, const Schedule& s);

}  // namespace remat::planner
