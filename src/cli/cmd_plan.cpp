// remat plan: the memory/compute frontier of a config, and the best plan under a byte budget.
// Runs nothing, so it prices models far larger than this machine can train.
#include <cstdio>

#include "cli/flags.h"
#include "core/error.h"
#include "checkpoint/policy.h"
#include "planner/optimize.h"
#include "train/report.h"

namespace remat::cli {

namespace {
struct PlanFlags {
  ModelFlags model;
  int64_t batch = 8;
  std::string budget;
  std::vector<std::string> strategies;
  std::string policy = "none";
  std::string segment_replay = "boundaries";
  bool json = false;
};
}  // namespace

void add_plan(CLI::App& root) {
  auto flags = std::make_shared<PlanFlags>();
  CLI::App* app = root.add_subcommand("plan", "Predict activation memory and recompute for strategies, print the "
                                              "frontier, or pick the plan with least recompute under --budget");
  PlanFlags& f = *flags;
  f.model.add_to(*app, "small");
  app->add_option("--batch", f.batch, "B: sequences per forward (the micro-batch)")->capture_default_str();
  app->add_option("--budget", f.budget, "Activation byte budget (e.g. 300MiB): print the best plan for it");
  app->add_option("--recompute", f.strategies, "Price these strategies instead of the frontier");
  app->add_option("--policy", f.policy, "Selective recomputation inside stored blocks: none | selective | gelu | norms")
      ->capture_default_str();
  app->add_option("--segment-replay", f.segment_replay, "With --recompute: how segments are replayed, boundaries "
                                                       "(least memory) or internals (least compute)")
      ->check(CLI::IsMember({"boundaries", "internals"}))->capture_default_str();
  app->add_flag("--json", f.json, "JSON output");
  app->callback([flags]() {
    PlanFlags& f = *flags;
    ModelConfig cfg = f.model.config();
    const int64_t T = f.model.seq(cfg);
    if (f.batch <= 0) throw Error("cli", "--batch must be positive", "e.g. --batch 8");
    check_sizes(cfg, f.batch, T, 0.0);  // plan runs nothing: any size that does not overflow
    const int L = int(cfg.L);
    const auto model = planner::shape_only_model(cfg);
    const NamePolicy policy = model->policy(f.policy);
    const autograd::Policy* pol = policy.keeps_all() ? nullptr : &policy;
    const planner::StepTrace trace = planner::trace_step(*model, f.batch, T, pol);
    std::vector<planner::Plan> plans;
    if (!f.budget.empty()) {
      plans.push_back(planner::best_plan(trace, parse_bytes(f.budget, "--budget")));
    } else if (!f.strategies.empty()) {
      for (auto& s : f.strategies) {
        StrategySpec spec = parse_strategy(s, L, false, f.segment_replay == "internals");
        Schedule sch = make_schedule(spec, L);
        plans.push_back({spec, planner::simulate_memory(trace, sch), planner::predict_compute(trace, sch)});
      }
    } else {
      plans = planner::frontier(trace);
    }
    nlohmann::json rows = nlohmann::json::array();
    if (!f.json)
      std::printf("remat plan: %s, B=%lld, T=%lld; |x| = %s, one block's internals = %s\n%-28s %14s %10s %12s %10s\n",
                  cfg.describe().c_str(), (long long)f.batch, (long long)T,
                  format_bytes(plans[0].memory.boundary_bytes).c_str(), format_bytes(plans[0].memory.block_bytes).c_str(),
                  "strategy", "activation", "overhead", "recomputes", "fwd-eq");
    for (const auto& p : plans) {
      if (f.json) {
        rows.push_back({{"strategy", p.spec.label()},
                        {"predicted_activation_bytes", p.memory.peak_activation},
                        {"overhead_predicted", p.compute.overhead()},
                        {"block_recomputes", p.compute.block_recomputes},
                        {"forward_equivalents", p.compute.forward_equivalents()}});
      } else {
        std::printf("%-28s %14s %9.3fx %12d %10.2f\n", p.spec.label().c_str(),
                    format_bytes(p.memory.peak_activation).c_str(), p.compute.overhead(), p.compute.block_recomputes,
                    p.compute.forward_equivalents());
      }
    }
    if (f.json) std::printf("%s\n", rows.dump(2).c_str());
    else if (!f.budget.empty())
      std::printf("use: remat train --recompute %s%s%s\n", plans[0].spec.base_label().c_str(),
                  plans[0].spec.replay_internals ? " --segment-replay internals" : "",
                  pol ? (" --policy " + f.policy).c_str() : "");
  });
}

}  // namespace remat::cli
