// The published figures remat plan prints beside its own (cmd_plan_textbook.cpp): Korthikanti et
// al.'s (2022) per-layer activation count, and Chen et al.'s (2016) sqrt checkpointing for GPT-3's
// depth. Internal to cmd_plan*.cpp.
#pragma once
#include <string>

#include "model/model.h"
#include "planner/budget.h"
#include "planner/comm.h"
#include "planner/planner.h"

namespace remat::cli {

// One block's activation bytes, term by term, from the dry run (store-everything, no policy), beside
// Korthikanti et al.'s per-layer count sbh(34 + 5as/h) and, for the presets it is usually quoted for,
// its figures.
void print_terms(const planner::StepTrace& tr, const Model& model, const std::string& preset);
// Self-test (a): for L = 96 (GPT-3's depth), the memory ratio of store-everything to sqrt
// checkpointing (Chen et al., 2016), and the compute overhead, in the formulas and in remat's figures.
void print_self_test_a(const Candidates& c, const PlanTarget& t);

}  // namespace remat::cli

namespace remat::cli {
// With --ranks N: the model state per rank under each ZeRO stage, Rajbhandari et al.'s (2020)
// accounting beside remat's dry run, and why they differ (cmd_plan_zero.cpp).
void print_model_state_per_rank(const ModelConfig& cfg, int ranks, int zero);
// With --zero 3: the all-gathers each textbook schedule implies, against FSDP with activation
// checkpointing's two per block in the backward.
void print_zero3_gathers(const ModelConfig& cfg, int ranks);
// Per rank and optimizer step (`accum` micro-batches of micro x T on each rank): the collectives'
// time at `link` (planner/comm.h) and the compute time at this machine's measured sgemm rate, and
// the step time between all and none of the communication hidden, for none, block and sqrt.
void print_step_time_per_rank(const ModelConfig& cfg, int ranks, int zero, int64_t micro, int64_t T, int64_t accum,
                              const planner::Link& link, const std::string& bandwidth, const std::string& latency);
// This machine's sgemm rate at the current thread count (the median of 5 products of 1024 x 1024
// matrices), in FLOP/s: the step-time tables' compute model.
double sgemm_rate();
// The FLOPs of `accum` micro-batches of `p`: at sgemm_rate(), the step-time tables' compute time.
inline double step_flops(const planner::ComputePrediction& p, int64_t accum) {
  return (p.fwd + p.bwd + p.recompute) * double(accum);
}
}  // namespace remat::cli
