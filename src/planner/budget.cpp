#include "planner/budget.h"

#include <omp.h>

#include <algorithm>
#include <limits>
#include <optional>

#include "core/allocator.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/record.h"
#include "planner/whole_step.h"

namespace remat {

planner::Calibration calibration_for(const std::string& path, const ModelConfig& cfg, int64_t micro, int64_t T) {
  planner::Calibration c = planner::load_calibration(path);
  planner::check_calibration(c, cfg, micro, T, omp_get_max_threads(), c.clock, path);
  return c;
}

Candidates make_candidates(const ModelConfig& cfg, int64_t micro, int64_t T, const planner::Calibration* calibration,
                           const std::vector<autograd::AttentionKind>& kernels,
                           const std::vector<std::string>& presets) {
  if (calibration && kernels.size() > 1)
    throw Error("calibration", "a calibration prices one attention kernel, and the planner was asked to weigh " +
                                   std::to_string(kernels.size()),
                "plan with one --attention kernel, or drop --calibration");
  Candidates c;
  c.cfg = cfg;
  c.model = planner::shape_only_model(cfg);
  for (autograd::AttentionKind k : kernels.empty() ? std::vector<autograd::AttentionKind>{cfg.attention} : kernels) {
    const std::vector<autograd::AttentionKind> every(size_t(cfg.L), k);
    auto add = [&](const std::string& preset, NamePolicy p, planner::StepTrace tr) {
      std::string name = preset;
      if (k != cfg.attention)
        name = std::string(autograd::attention_kind_name(k)) + (preset == "none" ? "" : "+" + preset);
      c.policies.push_back(std::move(p));
      c.presets.push_back(preset);
      c.kernels.push_back(k);
      c.problem.policy_names.push_back(std::move(name));
      c.problem.traces.push_back(std::move(tr));
    };
    add("none", NamePolicy(), planner::trace_step(*c.model, micro, T, nullptr, every));
    for (const PolicyPreset& preset : c.model->policy_presets()) {
      if (!presets.empty() && std::find(presets.begin(), presets.end(), preset.name) == presets.end()) continue;
      NamePolicy p = c.model->policy(preset.name);
      planner::StepTrace tr = planner::trace_step(*c.model, micro, T, &p, every);
      if (tr.blocks.empty() || tr.blocks[0].dropped.empty()) continue;  // drops nothing under this kernel
      add(preset.name, std::move(p), std::move(tr));
    }
  }
  // The DP prices a block's forward that keeps nothing by one cost per block, whatever its candidate
  // (planner/optimal.h's TimeModel::forward_pass): exact across kernels because both kernels' forwards
  // count the same FLOPs (ops_attention.cpp's AttnFlops); only their backwards and saves differ.
  for (const planner::StepTrace& tr : c.problem.traces)
    for (size_t i = 0; i < tr.blocks.size(); ++i)
      REMAT_ASSERT(tr.blocks[i].fwd_flops() == c.problem.traces[0].blocks[i].fwd_flops(),
                   "make_candidates: a block's forward FLOPs differ between candidates");
  if (calibration) {
    c.calibration = *calibration;
    c.calibration_index = planner::calibration_indices(*calibration, c.problem.policy_names);
    c.problem.time = planner::calibrated_time(*calibration, c.problem.policy_names);
  }
  return c;
}

planner::ChainPlan chain_plan(const Candidates& c, const Schedule& s, const std::vector<int>& block_policy) {
  planner::ChainPlan cp;
  cp.schedule = s;
  cp.block_policy = block_policy;
  cp.policy_names = c.problem.policy_names;
  const planner::StepTrace trace = planner::splice(c.problem.traces, block_policy);
  cp.memory = planner::simulate_memory(trace, s);
  cp.compute = planner::predict_compute(trace, s);
  return cp;
}

namespace {
// The time model's cost: calibrated seconds when there are some, else FLOPs of one micro-batch.
double cost_of(const std::optional<double>& seconds, const planner::ComputePrediction& c) {
  return seconds ? *seconds : c.fwd + c.bwd + c.recompute;
}
}  // namespace

double plan_cost(const StepPlan& p) { return cost_of(p.seconds, p.compute); }

std::optional<double> plan_seconds(const Candidates& c, const planner::ChainPlan& plan, int64_t accum) {
  if (!c.calibration) return std::nullopt;
  std::vector<int> pol;
  for (int p : plan.block_policy) pol.push_back(c.calibration_index.at(size_t(p)));
  return planner::optimizer_step_seconds(*c.calibration, planner::predict_time(*c.calibration, plan.schedule, pol), accum);
}

StepMemory dry_run_plan(const StepPlan& p, size_t data_bytes, const StepOptions* probe, const RankShare& rank) {
  const auto model = planner::shape_only_model(p.cfg);
  const std::vector<NamePolicy> policies = named_block_policies(*model, p.block_policy);
  StepOptions so;
  if (probe) so.before_action = probe->before_action, so.after_action = probe->after_action;
  so.schedule = p.schedule;
  so.block_policy = policy_pointers(policies);
  so.block_attention = p.block_attention;
  so.make_extension = rank.make_extension;
  so.optimizer_shard = rank.optimizer_shard;
  return dry_run_step(p.cfg, p.micro, p.T, p.batch / p.micro, so, data_bytes);
}

StepPlan unpriced_plan(const Candidates& c, const planner::ChainPlan& plan, const PlanTarget& t) {
  StepPlan sp;
  sp.cfg = c.cfg;
  sp.batch = t.batch;
  sp.micro = t.micro;
  sp.T = t.T;
  // The whole step's workspace (attention's per-thread buffers) depends on the thread count, so the
  // plan is for this process's: a run at another count is refused by name (check_plan_target).
  sp.threads = c.calibration ? c.calibration->threads : omp_get_max_threads();
  sp.schedule = plan.schedule;
  for (int p : plan.block_policy) {
    sp.block_policy.push_back(c.presets.at(size_t(p)));
    sp.block_attention.push_back(c.kernels.at(size_t(p)));
  }
  // One kernel on every block is the plan's model's kernel; only a mix is spelled per block.
  if (std::all_of(sp.block_attention.begin(), sp.block_attention.end(),
                  [&](autograd::AttentionKind k) { return k == sp.block_attention.front(); })) {
    if (!sp.block_attention.empty()) sp.cfg.attention = sp.block_attention.front();
    sp.block_attention.clear();
  }
  sp.activation_peak = plan.memory.peak_activation;
  sp.compute = plan.compute;
  sp.summary = plan.summary();
  sp.seconds = plan_seconds(c, plan, t.accum());
  return sp;
}

StepPlan price_plan(const Candidates& c, const planner::ChainPlan& plan, const PlanTarget& t) {
  StepPlan sp = unpriced_plan(c, plan, t);
  sp.step = dry_run_plan(sp, t.data_bytes, nullptr, t.rank);
  return sp;
}

namespace {
// A named strategy with one policy on every block, as a chain plan (no dry run).
planner::ChainPlan strategy_chain(const Candidates& c, const StrategySpec& spec, const std::string& policy) {
  const auto it = std::find(c.problem.policy_names.begin(), c.problem.policy_names.end(), policy);
  if (it == c.problem.policy_names.end())
    throw Error("plan", "policy '" + policy + "' drops nothing for " + c.cfg.describe(), "choose another --policy");
  const size_t p = size_t(it - c.problem.policy_names.begin());
  const int L = int(c.cfg.L);
  planner::ChainPlan cp;
  cp.schedule = make_schedule(spec, L);
  cp.block_policy.assign(size_t(L), int(p));
  cp.policy_names = c.problem.policy_names;
  cp.memory = planner::simulate_memory(c.problem.traces[p], cp.schedule);
  cp.compute = planner::predict_compute(c.problem.traces[p], cp.schedule);
  return cp;
}
std::string strategy_summary(const StrategySpec& spec, const std::string& policy) {
  return spec.label() + (policy == "none" ? "" : " + " + policy);
}
}  // namespace

StepPlan price_strategy(const Candidates& c, const StrategySpec& spec, const std::string& policy, const PlanTarget& t) {
  StepPlan sp = price_plan(c, strategy_chain(c, spec, policy), t);
  sp.summary = strategy_summary(spec, policy);
  return sp;
}

namespace {

std::string describe_target(const PlanTarget& t) {
  return t.cfg.describe() + " at batch " + std::to_string(t.batch) + " (micro-batch " + std::to_string(t.micro) +
         "), seq " + std::to_string(t.T);
}

}  // namespace

namespace {

// The plans a whole-step budget chooses among, the same for every budget (so that more memory can
// only add plans that fit, never take the fastest away): the whole frontier of the DP's activation
// budgets, and the textbook strategies under every policy. The DP ranks plans by activation bytes and
// the whole step is not monotone in them (a plan holding more activations can peak lower overall, when
// its activation peak falls at a quieter moment of the step), so every one is priced whole-step, lazily.
struct Alternative {
  planner::ChainPlan plan;
  std::string summary;  // empty: the plan's own
  double cost = 0;      // plan_cost of its StepPlan
  const Candidates* candidates = nullptr;
};
void add_alternatives(const Candidates& c, const PlanTarget& t, const std::vector<planner::ChainPlan>& front,
                      std::vector<Alternative>& out) {
  auto add = [&](planner::ChainPlan cp, std::string summary) {
    const double cost = cost_of(plan_seconds(c, cp, t.accum()), cp.compute);
    out.push_back({std::move(cp), std::move(summary), cost, &c});
  };
  const int L = int(c.cfg.L);
  for (const std::string& policy : c.problem.policy_names)
    for (const char* name : {"none", "all", "block", "sqrt"})
      for (bool last : {false, true}) {
        if (last && std::string(name) == "none") continue;
        const StrategySpec spec = parse_strategy(name, L, last);
        add(strategy_chain(c, spec, policy), strategy_summary(spec, policy));
      }
  // After the textbook rows, so that a tie goes to the plan with a name. The frontier descends in
  // time: its fastest plans are its last.
  for (size_t k = 0; k < front.size(); ++k) add(front[front.size() - 1 - k], "");
}


}  // namespace

namespace {
// Each level is one more DP pass at the resolution of its own range (a long chain's whole frontier
// has a few hundred slots: megabytes each at L=1000).
constexpr int kFinerLevels = 6;
void add_frontiers(KernelPlans& kp) {
  kp.frontier = planner::optimal_frontier(kp.candidates.problem);
  const size_t least = kp.frontier.front().memory.peak_activation, top = kp.frontier.back().memory.peak_activation;
  for (int k = 1; k <= kFinerLevels && (top >> k) > least; ++k)
    for (planner::ChainPlan& cp : planner::optimal_frontier(kp.candidates.problem, top >> k))
      kp.finer.push_back(std::move(cp));
}
}  // namespace

void check_calibrated_target(const PlanTarget& t) {
  if (t.calibration && t.allow_flash)
    throw Error("calibration", "a calibration prices one attention kernel, and --attention auto weighs two",
                std::string("plan with --attention ") + autograd::attention_kind_name(t.calibration->cfg.attention) +
                    " (the calibration's), or drop --calibration");
}

std::vector<KernelPlans> plan_kernels(const PlanTarget& t) {
  check_calibrated_target(t);
  std::vector<autograd::AttentionKind> kernels{t.cfg.attention};
  if (t.allow_flash && t.cfg.attention != autograd::AttentionKind::Flash) kernels.push_back(autograd::AttentionKind::Flash);
  std::vector<KernelPlans> out;
  for (autograd::AttentionKind k : kernels) {
    ModelConfig cfg = t.cfg;
    cfg.attention = k;
    KernelPlans kp{make_candidates(cfg, t.micro, t.T, t.calibration ? &*t.calibration : nullptr), {}, {}, {}};
    add_frontiers(kp);
    out.push_back(std::move(kp));
  }
  // Both kernels per block: a superset of the two above, planned last so that a mix is chosen only
  // where it is strictly faster than one kernel everywhere.
  if (t.per_block_attention && kernels.size() > 1) {
    KernelPlans kp{make_candidates(t.cfg, t.micro, t.T, nullptr, kernels), {}, {}, {}};
    add_frontiers(kp);
    out.push_back(std::move(kp));
  }
  for (KernelPlans& kp : out) kp.whole_step = std::make_shared<WholeStepModel>(kp.candidates, t);  // where they stay
  return out;
}

StepPlan plan_for_budget(const PlanTarget& t, size_t budget) { return plan_for_budget(t, budget, plan_kernels(t)); }

std::vector<BudgetPlan> budget_plans(const PlanTarget& t, const std::vector<KernelPlans>& kernels) {
  // Every kernel's plans in one list ranked by cost; ties go to the earlier kernel (a mix of kernels,
  // planned last, wins only where strictly faster) and then to the faster-by-frontier order.
  std::vector<Alternative> all;
  for (const KernelPlans& kp : kernels) {
    add_alternatives(kp.candidates, t, kp.frontier, all);
    for (const planner::ChainPlan& cp : kp.finer)
      all.push_back({cp, "", cost_of(plan_seconds(kp.candidates, cp, t.accum()), cp.compute), &kp.candidates});
  }
  std::stable_sort(all.begin(), all.end(), [](const Alternative& a, const Alternative& b) { return a.cost < b.cost; });
  std::vector<BudgetPlan> out;
  out.reserve(all.size());
  for (const Alternative& a : all) {
    BudgetPlan b{unpriced_plan(*a.candidates, a.plan, t), !a.summary.empty()};
    if (b.textbook) b.plan.summary = a.summary;
    out.push_back(std::move(b));
  }
  // Each kernel's plans priced whole-step together: a few dry runs measure what each action holds.
  for (const KernelPlans& kp : kernels) {
    std::vector<const planner::ChainPlan*> plans;
    std::vector<size_t> at;
    for (size_t j = 0; j < all.size(); ++j)
      if (all[j].candidates == &kp.candidates) plans.push_back(&all[j].plan), at.push_back(j);
    std::vector<StepMemory> steps = kp.whole_step->price(plans);
    for (size_t j = 0; j < at.size(); ++j) out[at[j]].plan.step = std::move(steps[j]);
  }
  // Then the DP's frontier planned for the whole step with what those measured (planner/optimal.h's
  // PlanProblem::step): for every budget, the fastest plan of the family whose whole step fits, at
  // the DP's resolution. One table for every budget, so more memory never gives a slower plan.
  std::vector<BudgetPlan> step_dp;
  for (const KernelPlans& kp : kernels) {
    planner::PlanProblem pp = kp.candidates.problem;
    pp.step = kp.whole_step->step_bytes();
    for (const planner::ChainPlan& cp : planner::optimal_frontier(pp)) {
      BudgetPlan b{unpriced_plan(kp.candidates, cp, t), false};
      b.plan.step.peak_total = cp.step_peak;
      b.plan.step.persistent = pp.step->persistent;
      b.plan.step.peak_activation = cp.memory.peak_activation;
      step_dp.push_back(std::move(b));
    }
  }
  // Ranked with the rest; a tie goes to the plan already there (a textbook name, a kernel planned first).
  for (BudgetPlan& b : step_dp) out.push_back(std::move(b));
  std::stable_sort(out.begin(), out.end(), [](const BudgetPlan& a, const BudgetPlan& b) { return plan_cost(a.plan) < plan_cost(b.plan); });
  return out;
}

namespace {
// The refusal of a budget below `l`'s whole step, the least of any plan.
[[noreturn]] void throw_below_least(const PlanTarget& t, size_t budget, const StepPlan& l);
}  // namespace

StepPlan plan_for_budget(const PlanTarget& t, size_t budget, const std::vector<KernelPlans>& kernels) {
  check_calibrated_target(t);
  REMAT_ASSERT(!kernels.empty() && !kernels.front().frontier.empty(), "plan_for_budget: no candidates");
  std::vector<BudgetPlan> all = budget_plans(t, kernels);
  // Every plan's whole step is priced (budget_plans); the one returned is dry-run in full, for its
  // per-category figures, and must agree.
  auto exact = [&](const StepPlan& p) {
    StepPlan e = p;
    e.step = dry_run_plan(e, t.data_bytes, nullptr, t.rank);
    REMAT_ASSERT(e.step.peak_total == p.step.peak_total, "plan_for_budget: the whole-step model and the dry run differ");
    return e;
  };
  if (t.rank.dry_run_each) {
    // Data parallelism holds bytes across actions (RankShare): the model's peaks are estimates here,
    // and each plan is dry-run in full, fastest first, until one fits.
    std::optional<StepPlan> least;
    for (const BudgetPlan& a : all) {
      StepPlan e = a.plan;
      e.step = dry_run_plan(e, t.data_bytes, nullptr, t.rank);
      if (e.step.peak_total <= budget) return e;
      if (!least || e.step.peak_total < least->step.peak_total) least = std::move(e);
    }
    throw_below_least(t, budget, *least);
  }
  // The fastest that fits: the same answer whatever the budget, so a larger budget never loses it.
  for (const BudgetPlan& a : all)
    if (a.plan.step.peak_total <= budget) return exact(a.plan);
  // Nothing fits: the least whole-step peak of any plan. On a tie the DP's own plan is named (the
  // refusal names it by what it does, checkpoints and all).
  const BudgetPlan* least = nullptr;
  for (const BudgetPlan& a : all)
    if (!least || a.plan.step.peak_total < least->plan.step.peak_total ||
        (a.plan.step.peak_total == least->plan.step.peak_total && !a.textbook && least->textbook))
      least = &a;
  throw_below_least(t, budget, exact(least->plan));
}

namespace {
void throw_below_least(const PlanTarget& t, size_t budget, const StepPlan& l) {
  // Two sizes that round to the same figure are also given in bytes, so that they read apart.
  const bool close = format_bytes(budget) == format_bytes(l.step.peak_total);
  auto size = [&](size_t b) { return format_bytes(b) + (close ? " (" + std::to_string(b) + " bytes)" : ""); };
  if (t.process) {  // the budget is the process's, and `budget` its step's share
    const size_t need = predicted_process(*t.process, l.step.peak_total);
    throw Error("budget",
                "--budget " + format_bytes(predicted_process(*t.process, budget)) + " for the process leaves the step " +
                    format_bytes(budget) + ", below the least whole-step peak of any plan, " + format_bytes(l.step.peak_total) +
                    " (" + l.summary + ", attention " + attention_label(l) + "; activations " + format_bytes(l.activation_peak) +
                    ", parameters, gradients, optimizer state and data " + format_bytes(l.step.persistent) + "), for " +
                    describe_target(t) + "; beside the step the process holds " + fixed_description(*t.process),
                "raise --budget to at least " + format_bytes(need) + " (" + std::to_string(need) + " bytes)" +
                    ", or use a smaller --micro-batch or --seq" +
                    (t.allow_flash || t.cfg.attention == autograd::AttentionKind::Flash ? "" : ", or --attention auto"));
  }
  throw Error("budget",
              "--step-budget " + size(budget) + " is below the least whole-step peak of any plan, " +
                  size(l.step.peak_total) + " (" + l.summary + ", attention " + attention_label(l) + "; activations " + format_bytes(l.activation_peak) +
                  ", parameters, gradients, optimizer state and data " + format_bytes(l.step.persistent) + "), for " +
                  describe_target(t),
              "raise --step-budget to at least " + size(l.step.peak_total) +
                  ", or use a smaller --micro-batch or --seq" +
                  (t.allow_flash || t.cfg.attention == autograd::AttentionKind::Flash ? "" : ", or --attention auto"));
}

}  // namespace

}  // namespace remat
