// The whole step's peak of many plans over one set of candidates, from a few dry runs instead of one
// per plan.
//
// During one action of the chain (a block's forward, its backward, the free of a checkpoint) the step
// holds the activation level before it (simulate_memory's count: saved, checkpoint, recompute) plus
// bytes that depend on the action alone: the state every step holds (parameters, gradients, AdamW's
// moments, data), the gradient flowing back, the output of a block just run, and what the action's own
// ops allocate, free and use as workspace. Those depend on the block, its candidate (policy and kernel),
// the action (kind, what it keeps, first pass or replay), where its input comes from (a checkpoint, or
// the block before's output just computed), whether such an output is still live, and whether the
// block's input is held as a checkpoint: an action's key. The head runs on the level the forward phase
// ends at, and what runs outside the chain (the embedding, AdamW) on a level no plan changes. So
//
//   whole-step peak = max(outside, level before the head + head, max over actions k of level_k + W[key_k])
//
// and each W is measured once, by a dry run of the step's own code (dry_run_step) with a probe around
// every action (StepOptions::before_action/after_action) that reads the accounting allocator's peak.
// The plans dry-run are a greedy cover of the keys of the plans to price: a few dozen dry runs price
// thousands of plans (GPT-3's 96 blocks: about 2,800 plans). Blocks whose saves are alike under every
// candidate share their keys. Tests hold the model equal to a dry run of
// every plan, to the byte.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "planner/budget.h"

namespace remat {

class WholeStepModel {
 public:
  // For the plans over `c` (which must outlive the model) made for `t`; nothing is measured yet.
  WholeStepModel(const Candidates& c, const PlanTarget& t);

  // The whole step of each plan (schedule and a candidate per block, indices into c's candidates):
  // peak_total and persistent. A plan with a key not measured yet is dry-run first, plans with the
  // most such keys first, until every plan's keys are known; those plans get their dry run's whole
  // StepMemory, the rest the model's peak (the other per-category fields are left empty).
  std::vector<StepMemory> price(const std::vector<const planner::ChainPlan*>& plans);

  // What the model knows, for the DP to plan the whole step with (PlanProblem::step): valid while the
  // model lives; later measurements reach it too. Needs one plan priced first.
  planner::StepBytes step_bytes() const;
  // The whole-step peak of a plan from what is known, or nullopt when one of its keys is not.
  std::optional<size_t> known_peak(const planner::ChainPlan& plan) const;

  // Plans dry-run so far, keys known, and keys measured twice with different bytes (0: every key's
  // bytes depend on the key alone, as the model assumes; tests check it).
  size_t dry_runs() const { return dry_runs_; }
  size_t keys() const { return w_.size(); }
  size_t inconsistent() const { return inconsistent_; }

 private:
  std::vector<uint64_t> action_keys(const planner::ChainPlan& plan) const;
  StepMemory measure(const planner::ChainPlan& plan, const std::vector<uint64_t>& keys);
  size_t predict(const planner::ChainPlan& plan, const std::vector<uint64_t>& keys) const;
  planner::MemoryPrediction levels(const planner::ChainPlan& plan, planner::ActionLevels* lv) const;
  void observe(uint64_t key, size_t bytes);

  const Candidates& c_;
  PlanTarget t_;
  std::vector<std::vector<planner::BlockMemory>> blocks_;  // [p][i]
  std::vector<int> class_;                                 // [i]: the first block alike under every candidate
  std::unordered_map<uint64_t, size_t> w_;                 // key -> bytes above the level
  std::optional<size_t> head_, outside_;
  size_t persistent_ = 0, dry_runs_ = 0, inconsistent_ = 0;
};

}  // namespace remat
