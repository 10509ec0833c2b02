// The run's answer in plain words, last in `remat train`'s output: what it kept and what that cost,
// against store-everything, and what the planner would run under a smaller whole-step budget.
#pragma once
#include <string>

#include "core/process_memory.h"
#include "planner/budget.h"
#include "train/report.h"

namespace remat {

// Lines such as
//   in short: this run kept 12.6 MiB of activations where storing everything keeps 42.1 MiB (-70%),
//   for +6.1% step time (measured); its whole step peaked at 27.2 MiB, as predicted to the byte.
//   with less memory: under --budget 20MiB (the whole step), the planner would run 4 checkpoints, ...
// `t` is the run's model, batch and data, for the plan; `fixed`, the process's part beside the step, for
// the --budget it suggests (a budget is the process's). Nothing here trains or measures.
std::string plain_summary(const ReportInput& in, const PlanTarget& t, const ProcessFixed& fixed, bool planner_line = true);

// The whole step of store-everything (strategy none, no policy) for `t`, by its dry run.
size_t store_all_whole_step(const PlanTarget& t);

}  // namespace remat
