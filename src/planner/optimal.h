// The optimal planner: a dynamic program over the chain of blocks (rotor's, Beaumont et al. 2019,
// "Optimal checkpointing for heterogeneous chains", extended with a policy per block).
//
// The family of schedules. To backpropagate a segment [s, t) of the chain, given its input x_s (held
// as a checkpoint, or just computed) and the gradient of its output, a schedule either
//   (1) runs block s keeping its internals under one of the candidate policies, backpropagates
//       [s+1, t), then runs block s's backward; or
//   (2) keeps x_s as a checkpoint, runs blocks s..s'-1 keeping nothing, backpropagates [s', t)
//       from x_s', then backpropagates [s, s') from the checkpoint x_s.
// The last segment ends in the head (final norm, LM head, loss), so "recompute the last segment"
// is just (2) with s' = L. Every strategy remat names (none, all, block, sqrt, uniform:K,
// segments:..., either replay mode, --recompute-last, a selective policy) is one schedule of this
// family, and the DP finds the fastest one whose predicted peak fits the budget.
//
// A candidate may also fix the block's attention kernel (planner/budget.h's make_candidates under
// --attention auto: (policy, kernel) pairs), so the kernel too is chosen per block. A forward keeping
// nothing is priced once per block whatever the candidate (TimeModel::forward_pass): both kernels'
// forwards count the same FLOPs, which make_candidates checks.
//
// Bytes and costs come from dry runs (planner.h), one per candidate policy: nothing is restated.
// Memory is counted exactly as simulate_memory counts it (saved activations, checkpoints and
// in-flight recompute, op by op through each block's backward); the DP works in byte slots, rounding
// every size up, so any plan it returns fits; with slots of the sizes' common divisor it is exact.
#pragma once
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "planner/planner.h"
#include "planner/pricing.h"

namespace remat::planner {

struct ChainPlan {
  Schedule schedule;                  // actions over the chain (the head runs between the phases)
  std::vector<int> block_policy;      // per block: an index into the candidate policies
  std::vector<std::string> policy_names;
  MemoryPrediction memory;            // simulate_memory of the schedule over the spliced trace
  ComputePrediction compute;          // predict_compute of the same
  double time = 0;                    // the DP's objective, fixed term included (schedule_time, TimeModel units)
  size_t step_peak = 0;               // planned with PlanProblem::step: its whole-step peak
  size_t slot_bytes = 1;              // the DP's memory resolution
  std::string summary() const;        // "4 checkpoints, 9 block recomputes, selective on 3 blocks"
};

// Planning for the whole step (parameters, gradients, optimizer state, data, activations, their
// gradients, transients, workspace) instead of the activations alone: what each action of the chain
// holds above the activation level before it (planner/whole_step.h measures it).
struct StepBytes {
  size_t persistent = 0;  // held throughout by every plan (parameters, gradients, optimizer state, data)
  size_t outside = 0;     // the step's peak outside the chain (the embedding, AdamW): a floor
  size_t head = 0;        // the head's peak above the level the forward phase ends at
  // The bytes above the level before action `a` of block a.block under candidate p (persistent
  // included), given where its input comes from (a checkpoint), whether a block output is live and
  // whether x_i is held as a checkpoint; nullopt when not known (the DP then takes no such option).
  std::function<std::optional<size_t>(const Action& a, int p, bool in_checkpoint, bool cur_live, bool boundary)> action;
  // The whole-step peak of a plan (schedule, a candidate per block), for the textbook schedules
  // weighed beside the DP at coarse resolution; nullopt when not known.
  std::function<std::optional<size_t>(const Schedule&, const std::vector<int>&)> plan;
};

struct PlanProblem {
  // One dry run per candidate policy, same model and micro-batch: traces[p].blocks[i] is block i
  // under policy p. policy_names[p] names it.
  std::vector<StepTrace> traces;
  std::vector<std::string> policy_names;
  TimeModel time;  // every term, or none: flop_time(traces)
  // Upper bound on DP slots (memory resolution); 0: chosen from the chain's size so that the DP
  // stays within about a second.
  size_t max_slots = 0;
  // Set: plan for the whole step (every accounted byte), budgets in whole-step bytes (StepBytes).
  std::optional<StepBytes> step;
};

// A trace whose block i is traces[block_policy[i]].blocks[i]: what simulate_memory and
// predict_compute price for a plan with a policy per block.
StepTrace splice(const std::vector<StepTrace>& traces, const std::vector<int>& block_policy);

// The fastest schedule of the family whose predicted peak activation bytes fit `budget` (the
// count of simulate_memory). Throws remat::Error naming the least memory any schedule needs.
ChainPlan optimal_plan(const PlanProblem& problem, size_t budget);

// The same without the refusal: nullopt when nothing fits. With problem.step, `budget` is whole-step
// bytes and the plan is the fastest whose whole step fits.
std::optional<ChainPlan> fastest_plan(const PlanProblem& problem, size_t budget);

// The least peak any schedule of the family reaches (the minimum of the frontier), and the plan.
ChainPlan least_memory_plan(const PlanProblem& problem);

// The Pareto frontier of (predicted peak, time) over the family, ascending in memory and
// descending in time, from one DP pass over budgets up to the fastest plan's peak.
std::vector<ChainPlan> optimal_frontier(const PlanProblem& problem);
// The same below `limit` activation bytes (0: no limit), at the resolution optimal_plan uses for that
// budget: on long chains, finer than the whole frontier's.
std::vector<ChainPlan> optimal_frontier(const PlanProblem& problem, size_t limit);

// The DP's limits: tables of at most kMaxTableBytes, filled in at most kMaxTableUpdates updates (a
// few seconds here). Longer chains are refused with a remat::Error, before any table is allocated.
inline constexpr double kMaxTableBytes = 2.0 * 1073741824.0;
inline constexpr double kMaxTableUpdates = 5e9;
// The longest chain of same-shaped blocks within those limits, and a refusal of longer ones that costs
// nothing (for commands that would trace the chain first).
int max_planned_layers();
void check_plannable(int L);

// Every schedule of the family (with every assignment of policies to blocks kept internally), for
// testing the DP against brute force on small chains. `visit` gets each schedule and its policies.
void enumerate_family(int L, int num_policies,
                      const std::function<void(const Schedule&, const std::vector<int>&)>& visit);

}  // namespace remat::planner
