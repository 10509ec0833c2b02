// Plans for a whole training step. The optimal planner (planner/optimal.h) chooses, per block, a
// policy among the model's own presets and where to checkpoint and recompute; this layer prices each
// plan by the dry run of the whole step (dry_run_step: parameters, gradients, AdamW state, data,
// activations, activation gradients, transients and workspace), so that a byte budget means every
// accounted byte of the step. It also carries plans to `remat train --plan` in plan files.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/process_memory.h"
#include "checkpoint/policy.h"
#include "checkpoint/schedule.h"
#include "model/model.h"
#include "planner/calibration.h"
#include "planner/optimal.h"
#include "step/run_config.h"
#include "step/step.h"

namespace remat {

class WholeStepModel;

// What a plan is made for.
struct PlanTarget {
  ModelConfig cfg;              // cfg.attention: the kernel asked for
  int64_t batch = 8;            // sequences per optimizer step
  int64_t micro = 8;            // sequences per forward (a divisor of batch)
  int64_t T = 0;                // sequence length
  size_t data_bytes = 0;        // what the data set holds in the allocator (Category::Data)
  bool allow_flash = false;     // the planner may switch a naive-attention model to flash attention
  // The time model: this machine's calibration (made for cfg, micro and T: calibration_for), or FLOPs.
  std::optional<planner::Calibration> calibration;
  // With allow_flash: the planner may also give each block its own kernel (the DP chooses it per block,
  // with the block's policy). apply_plan hands the kernels to TrainOptions::block_attention.
  bool per_block_attention = false;
  // Under data parallelism, the step of one rank: `batch` is then the rank's share, and every dry run
  // adds the rank's reduction buffers and shards AdamW's state as the rank's trainer does.
  RankShare rank = {};
  // The process's part beside the step, when the budget is a process's (train's and plan's --budget):
  // a refusal then gives the budget the least plan needs as a process.
  std::optional<ProcessFixed> process = {};
  int64_t accum() const { return batch / micro; }
};

// Loads the calibration file `path` and checks it was measured for this model (its attention kernel
// included), micro-batch, seq and this process's OpenMP thread count: remat::Error("calibration")
// naming the first difference otherwise.
planner::Calibration calibration_for(const std::string& path, const ModelConfig& cfg, int64_t micro, int64_t T);

// The candidates of one model and its attention kernels: under each kernel, "none" (keep everything)
// and each of the model's policy presets that drops something under that kernel, with one dry run
// each. `kernels` empty: cfg.attention alone; else candidates of each kernel, in that order, and the DP
// chooses a (policy, kernel) pair per block. A candidate of a kernel other than cfg.attention is named
// "<kernel>" or "<kernel>+<preset>" ("flash", "flash+gelu"). With a calibration (for this model,
// micro-batch and seq; one kernel only), the DP's time is calibrated_time: it minimises predict_time;
// without, FLOPs. `presets` not empty: only those of the model's presets are candidates (beside
// "none"), for a calibration that covers only them (remat calibrate --policies) or a caller that
// prices a few.
struct Candidates {
  ModelConfig cfg;
  std::unique_ptr<Model> model;       // shape-only
  std::vector<NamePolicy> policies;   // [p] for problem.policy_names[p]; [0] keeps everything
  std::vector<std::string> presets;   // [p]: the policy's name among the model's ("none" or a preset)
  std::vector<autograd::AttentionKind> kernels;  // [p]: the attention kernel of candidate p
  planner::PlanProblem problem;
  std::optional<planner::Calibration> calibration;
  std::vector<int> calibration_index;  // [p]: problem.policy_names[p]'s index in calibration->policies
};
// Throws remat::Error("calibration") naming a candidate policy the calibration lacks, or when a
// calibration meets more than one kernel.
Candidates make_candidates(const ModelConfig& cfg, int64_t micro, int64_t T,
                           const planner::Calibration* calibration = nullptr,
                           const std::vector<autograd::AttentionKind>& kernels = {},
                           const std::vector<std::string>& presets = {});
// A schedule with a candidate per block (indices into c.problem.policy_names), as a chain plan: its
// activation memory and FLOPs over the spliced trace, as the DP prices its own plans.
planner::ChainPlan chain_plan(const Candidates& c, const Schedule& s, const std::vector<int>& block_policy);

// What a plan is, as its file holds it: the run it is for and what each block does.
struct PlanSpec {
  ModelConfig cfg;                         // the plan's attention kernel and precision included
  int64_t batch = 0, micro = 0, T = 0;
  // The thread count the plan was priced at (the whole step's workspace depends on it; a calibrated
  // plan's is its calibration's). 0 in older files: any count.
  int64_t threads = 0;
  Schedule schedule;
  std::vector<std::string> block_policy;   // per block: "none" or a preset of the model
  // Per block, when the plan mixes kernels (StepOptions::block_attention); empty: cfg.attention on
  // every block (a plan whose blocks all run one kernel has it as cfg.attention).
  std::vector<autograd::AttentionKind> block_attention;

  template <class S, class V>
  static void fields(S& s, V&& v) {
    v("model", s.cfg), v("batch", s.batch), v("micro_batch", s.micro), v("seq", s.T), v("threads", s.threads);
    v("schedule", s.schedule), v("block_policy", s.block_policy), v("block_attention", s.block_attention);
  }
  bool operator==(const PlanSpec&) const = default;
};

// A plan for one training step, with its predictions.
struct StepPlan : PlanSpec {
  size_t activation_peak = 0;              // saved + checkpoint + recompute (simulate_memory)
  StepMemory step;                         // the whole step (dry_run_step)
  planner::ComputePrediction compute;      // FLOPs of one micro-batch
  // With a calibration: predicted seconds of one optimizer step (predict_time, every micro-batch).
  std::optional<double> seconds;
  std::string summary;                     // "4 checkpoints, 9 block recomputes, selective on 3 blocks"
};

// What plans are ranked by, the DP's time model over the whole step: calibrated seconds when the plan
// has them, else FLOPs (fwd + bwd + recompute of one micro-batch).
double plan_cost(const StepPlan& p);
// The calibrated seconds of one optimizer step of `accum` micro-batches of `plan` (one of c's), when c
// has a calibration.
std::optional<double> plan_seconds(const Candidates& c, const planner::ChainPlan& plan, int64_t accum);

// `plan` (one of c's) as a StepPlan for `t`, its whole step not priced yet (step left empty).
StepPlan unpriced_plan(const Candidates& c, const planner::ChainPlan& plan, const PlanTarget& t);
// Prices `plan` (one of c's) for `t`: the whole step by dry run.
StepPlan price_plan(const Candidates& c, const planner::ChainPlan& plan, const PlanTarget& t);
// Prices a named strategy with one policy on every block (a name in c.problem.policy_names).
StepPlan price_strategy(const Candidates& c, const StrategySpec& spec, const std::string& policy, const PlanTarget& t);
// The whole step of `p` by dry run, `data_bytes` of data held, as the step of `rank` (empty: one
// process); `probe`'s before_action and after_action, when given, are called around each action of
// the chain.
StepMemory dry_run_plan(const StepPlan& p, size_t data_bytes, const StepOptions* probe = nullptr,
                        const RankShare& rank = {});

// The fastest plan whose whole-step peak (every accounted byte) fits `budget`, among a set of plans
// that does not depend on the budget: the optimal frontier of each kernel the target may plan with
// (plan_kernels) and the textbook strategies under every policy, each priced by dry run of the whole
// step. A larger budget therefore never gives a slower plan. With t.allow_flash both kernels are
// planned (with t.per_block_attention, both per block too: a mix wins only where it is strictly
// faster). "Faster": by t.calibration when given (the DP then minimises predict_time too), else by
// FLOPs. Throws remat::Error before any training when nothing fits, naming the least whole-step peak
// of any of those plans and that plan, and when a calibration (one kernel's) meets allow_flash.
StepPlan plan_for_budget(const PlanTarget& t, size_t budget);

// The candidates of each kernel a target may plan with (its own; flash too with allow_flash; both
// per block too with per_block_attention, last), and their optimal frontier: what plan_for_budget starts from, computed once for callers that also show it.
struct KernelPlans {
  Candidates candidates;
  std::vector<planner::ChainPlan> frontier;
  // Frontiers below 1/2, 1/4, ... 1/64 of the fastest plan's activation peak, each at the DP's finer
  // resolution there (optimal_frontier's limit): more plans for tight budgets, the same for every
  // budget (long chains' whole frontier is coarse: a few hundred slots).
  std::vector<planner::ChainPlan> finer;
  // The whole step of the plans over `candidates`, measured as they are priced (planner/whole_step.h).
  std::shared_ptr<WholeStepModel> whole_step;
};
std::vector<KernelPlans> plan_kernels(const PlanTarget& t);
StepPlan plan_for_budget(const PlanTarget& t, size_t budget, const std::vector<KernelPlans>& kernels);
// The plans a whole-step budget chooses among, the same for every budget: under each kernel the
// textbook strategies under every policy, then the DP's frontier fastest first, then its finer
// frontiers; unpriced (StepPlan::step left empty), ranked by plan_cost with ties kept in that order.
// plan_for_budget and the frontier `remat plan` draws (planner/frontier.h) both weigh this one list.
struct BudgetPlan {
  StepPlan plan;
  bool textbook = false;  // a named strategy (its summary names it), not one of the DP's plans
};
std::vector<BudgetPlan> budget_plans(const PlanTarget& t, const std::vector<KernelPlans>& kernels);
// Refuses a target whose calibration cannot price every kernel it may plan (allow_flash).
void check_calibrated_target(const PlanTarget& t);

// "naive", "flash", or "per block: 0-3 naive, 4-11 flash" for a plan that mixes kernels.
// The same for a run: the model's kernel, or a plan's kernels per block when given.
std::string attention_label(autograd::AttentionKind model_kind, const std::vector<autograd::AttentionKind>& blocks);
std::string attention_label(const StepPlan& p);

// The plan into the run, as it is: model, batch, micro-batch, seq, schedule, policy and kernel per
// block (RunConfig's typed plan fields; its strategy strings then only label it).
void apply_plan(const StepPlan& p, RunConfig& o);
// The plan as a `remat train` strategy spelling when it has a short one ("block", "uniform:3",
// "none --policy selective"...), else "".
std::string short_spelling(const StepPlan& p);

// Plan files: {"format": "remat-plan", "version": kPlanVersion, the PlanSpec's fields through its one
// codec (record.h: "model" with its precision, "batch", "micro_batch", "seq", "threads", "schedule":
// ["f0c", ...], "block_policy", "block_attention"), "summary", "predicted": {...}}. Versions 1 and 2
// did not record the precision (a bf16 plan read back as fp32), so they are refused by name.
constexpr int kPlanVersion = 3;
nlohmann::json plan_to_json(const StepPlan& p);
// Checks everything (format, version, types, the model config, the schedule for its L, the policy
// names against the model's presets): remat::Error naming `where` and what is wrong.
StepPlan plan_from_json(const nlohmann::json& j, const std::string& where);
void write_plan_file(const std::string& path, const StepPlan& p);  // atomically
StepPlan read_plan_file(const std::string& path);
// Refuses a plan made for another model (precision included), batch, micro-batch, sequence length or
// thread count (`threads` is this process's), naming every field that differs,
// in one line. The attention kernel is the plan's unless `attention_given` (then it must agree).
void check_plan_target(const StepPlan& p, const ModelConfig& cfg, bool attention_given, int64_t batch, int64_t micro,
                       int64_t T, int64_t threads, const std::string& path);


}  // namespace remat
