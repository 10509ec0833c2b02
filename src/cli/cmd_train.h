// What the parts of remat train share: cmd_train.cpp (its flags and the run),
// cmd_train_signals.cpp (the signals that end a run) and cmd_train_options.cpp (a run's options
// from a checkpoint or a plan). Internal to those files.
#pragma once
#include <functional>
#include <optional>
#include <CLI/CLI.hpp>
#include <atomic>
#include <string>

#include "cli/flags.h"

#include "planner/budget.h"

namespace remat::cli {

// The signals that end a run (cmd_train_signals.cpp, which says how): the first one taken once
// training began, 0 before; raised while a checkpoint is written; set once training begins.
extern std::atomic<int> g_stop_signal;
extern std::atomic<int> g_saving;
extern std::atomic<bool> g_training;
// "SIGINT", "SIGTERM", ... for the signals that end a run; "a signal" for any other.
const char* signal_name(int sig);
// Blocks the stop signals in every thread and takes them in one thread of its own. Call it before
// any other thread is created.
void install_signal_handlers();

// --resume: `o` becomes the checkpoint's run, with the flags the command line may change
// (cmd_train_options.cpp says which); refused in one line naming every flag that contradicts it.
void merge_resume(CLI::App& app, const ModelFlags& mf, TrainOptions& o);
// --budget SIZE / --plan FILE: the strategy and policies of `o` from a plan; nothing without either.
// --budget is the process's: the step is planned within what the runtime, the mapped token files and
// the allocator's rounding leave of it (core/process_memory.h).
void apply_budget_or_plan(CLI::App& app, const ModelFlags& mf, const std::string& budget_text,
                          const std::string& plan_file, TrainOptions& o);

// The fastest plan for one rank of `ranks` whose whole step fits `budget` (ZeRO stage `zero`,
// `rank_accum` micro-batches a rank), and under ZeRO-3 its gather policy: `fixed_hold` when given,
// else both are planned and the one whose plan costs less by `cost` (plan_cost when empty: compute
// alone) is taken, a tie going to hold (fewer all-gathers). The cost of each policy that fits is kept.
// "--gather hold" or "--gather regather": how plan's use: line and the plan lines spell a policy.
inline std::string gather_flag(bool hold) { return hold ? "--gather hold" : "--gather regather"; }
struct RankBudgetPlan {
  StepPlan plan;
  bool hold = true;
  std::optional<double> hold_cost, regather_cost;
};
RankBudgetPlan plan_rank_budget(PlanTarget t, size_t budget, int ranks, int zero, int64_t rank_accum, bool overlap,
                                std::optional<bool> fixed_hold = std::nullopt,
                                const std::function<double(const StepPlan&, bool hold)>& cost = {});

}  // namespace remat::cli
