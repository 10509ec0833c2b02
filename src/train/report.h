// The memory / compute report of a run: what was predicted beside what was measured.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "checkpoint/schedule.h"
#include "model/model.h"
#include "train/step.h"

namespace remat {

struct ReportInput {
  const Model* model = nullptr;  // naming, and the dry run the predictions read
  int64_t micro_batch = 0, T = 0, accum = 1;
  StrategySpec strategy;
  StepMeasure measure;  // one optimizer step (all micro-batches)
  const autograd::Policy* policy = nullptr;  // a named-tensor policy, if any
  std::string policy_label = "none";
};

// The textbook overhead of a strategy (block units, fwd = 1, bwd = 2, every segment recomputed):
// none 1, segments 4/3, all (3L + L(L+1)/2) / 3L.
double spec_overhead(const StrategySpec& s, int L);

// Multi-line text: bytes per category, strategy peak measured vs predicted (split into boundaries,
// in-flight recompute and the rest), per-layer measured vs analytic activation bytes, the largest
// named activations, and block forwards / recomputes / backwards with FLOPs and overhead.
std::string memory_report(const ReportInput& in);
nlohmann::json report_json(const ReportInput& in);

}  // namespace remat
