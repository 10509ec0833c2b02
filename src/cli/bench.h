// remat bench, in parts by what each does:
//   cmd_bench.cpp         the flags, checked before any work, and --configs;
//   bench_rows.cpp        the rows as the planner's plans (one set of candidates per config), and the
//                         run of --recompute / --plan rows, each a Trainer;
//   bench_time_model.cpp  --time-model: rows interleaved on one model, measured beside the planner's
//                         FLOP and calibrated predictions;
//   bench_machine.cpp     facts of the machine and the step: the per-op profile, the GEMM rate, the
//                         bf16 code paths, the load average.
// Every prediction is the planner's (planner/budget.h): no row is priced here.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "autograd/tape.h"
#include "cli/flags.h"
#include "planner/budget.h"

namespace remat::cli {

struct BenchFlags {
  ModelFlags model;
  std::vector<std::string> strategies{"none", "all", "block", "sqrt"};
  bool recompute_last = false;
  std::string segment_replay = "boundaries";
  int64_t batch = 8, micro_batch = 0, steps = 5, warmup = 2;
  uint64_t seed = 1;
  std::string data;
  bool json = false;
  bool profile = false;
  bool time_model = false;
  std::string configs;                   // --configs, for --time-model
  std::vector<std::string> calibration;  // one per config, in order
  std::string clock = "wall";
  std::string plan;  // a plan file (remat plan ... --out FILE)
};

// ---- the rows as plans (bench_rows.cpp) ----

// A bench row: "[flash+|naive+]STRATEGY[+POLICY]", e.g. "selective", "flash+block", "block+gelu".
struct RowSpec {
  std::string label, strategy = "none", policy = "none";
  std::optional<autograd::AttentionKind> attention;
  const StepPlan* plan = nullptr;  // the row runs this plan (label, strategy and policy unused)
};
// Throws remat::Error("bench") naming the token that is neither a strategy, a policy of `model` nor a
// kernel, or a row that names two of one kind.
RowSpec parse_row(const std::string& text, const Model& model);

// The row's plan, priced by the planner from `c`: schedule `s`, block i keeping presets[i]'s
// internals under kernels[i] (a list of one entry: every block). The plan is the row as asked; a
// preset that drops nothing under its kernel is not a candidate (make_candidates), and is priced as
// that kernel's "none", which is the same step. Every preset and kernel must be among c's.
StepPlan row_plan(const Candidates& c, const PlanTarget& t, const Schedule& s, const std::vector<std::string>& presets,
                  const std::vector<autograd::AttentionKind>& kernels);

// The rows of `remat bench` (no --time-model), run one after the other and printed as each is
// measured: `specs` as parsed (the plan file's row included), on `cfg` at seq T, predicted from one
// set of candidates of the kernels and presets they run, and from `calibration` (from `calibration_file`,
// checked for this model) when given.
void run_rows(const BenchFlags& f, const ModelConfig& cfg, int64_t T, const std::vector<RowSpec>& specs,
              const std::optional<planner::Calibration>& calibration, const std::string& calibration_file);

// ---- --time-model (bench_time_model.cpp) ----

// One model of a --time-model run.
struct TimeConfig {
  std::string label;  // "L16 C256 NH4 T256 B8"
  ModelConfig cfg;
  int64_t B = 0, T = 0;
  std::string calibration;  // the file to predict from, or "" to calibrate in the run
  std::optional<planner::Calibration> cal;  // its contents, checked for this config before any work
};

// The policies --time-model calibrates and plans with: "none" and "selective", then a plan file's
// other policies.
std::vector<std::string> time_model_policies(const StepPlan* file_plan);

// remat bench --time-model over every config: one table, a row per (config, row), each config's rows
// printed as soon as they are measured; then the worst error of each prediction and each config's
// notes. `command` reproduces the run.
void run_time_model(const BenchFlags& f, const std::vector<TimeConfig>& configs, const StepPlan* file_plan,
                    const std::string& plan_file, const std::string& command);

// ---- the machine and the step (bench_machine.cpp) ----

double now();  // seconds, steady clock
// Per-op wall time of one step, as the median over the timed steps, slowest first; and as a table.
nlohmann::json profile_json(const std::vector<autograd::OpProfile>& steps);
void print_profile(const nlohmann::json& rows, double step_ms);
// The GEMM rate of this machine at a GPT-sized shape, measured now (GFLOP/s), in the run's precision.
double measure_gemm_peak(DType precision);
// Which bf16 code ran: the layers' matmul, the conversions' path and the attention products' path.
nlohmann::json bf16_paths();
// The machine's load, as /proc/loadavg's first figure (the 1-minute average), or -1.
double load_average();

}  // namespace remat::cli
