// remat plan: the memory/compute frontier of a config, and the best plan under a byte budget.
// Runs nothing, so it prices models far larger than this machine can train.
#include <cstdio>
#include <optional>

#include "cli/flags.h"
#include "planner/planner.h"
#include "core/error.h"
#include "checkpoint/policy.h"
#include "planner/optimize.h"
#include "train/report.h"

namespace remat::cli {

namespace {
struct PlanFlags {
  ModelFlags model;
  int64_t batch = 8, micro_batch = 0;
  std::string budget;
  std::vector<std::string> strategies;
  std::string policy = "none";
  std::string segment_replay = "boundaries";
  bool json = false;
};
// One block's activation bytes, term by term, from the dry run (store-everything, no policy), beside
// Korthikanti et al.'s per-layer count sbh(34 + 5as/h) and, for the presets the textbook works
// through, its figures. remat counts fp32 tensors as its ops save them; each difference is named.
void print_terms(const planner::StepTrace& tr, const Model& model, const std::string& preset) {
  if (tr.blocks.empty()) return;
  const ModelConfig& c = tr.cfg;
  const double s = double(tr.T), b = double(tr.B), h = double(c.C), a = double(c.NH);
  const double sbh = s * b * h;
  const auto& blk = tr.blocks[0];
  std::printf("per-layer activation bytes (dry run of %s, store-everything, fp32, dropout %s):\n", blk.name.c_str(),
              c.dropout > 0 ? "on" : "off");
  std::printf("  %-40s %-22s %12s %10s\n", "tensor (saved by its op)", "shape", "bytes", "x sbh");
  double total = 0, quadratic = 0;
  for (const auto& t : blk.kept) {
    const auto local = model.split_name(t.name);
    const std::string name = t.input ? t.name + " (block input)" : (local ? local->second : t.name);
    std::printf("  %-40s %-22s %12s %10.3f\n", name.c_str(), shape_str(t.shape).c_str(), format_bytes(t.bytes).c_str(),
                double(t.bytes) / sbh);
    total += double(t.bytes);
    if (t.shape.size() == 4 && t.shape[2] == tr.T && t.shape[3] == tr.T) quadratic += double(t.bytes);
  }
  const double korth = sbh * (34.0 + 5.0 * a * s / h);
  std::printf("  %-40s %-22s %12s %10.3f\n", "total per layer", "", format_bytes(size_t(total)).c_str(), total / sbh);
  std::printf("  Korthikanti et al. (2022), sbh(34 + 5as/h) = %.3f sbh = %s per layer, x%lld layers = %s\n",
              34.0 + 5.0 * a * s / h, format_bytes(size_t(korth)).c_str(), (long long)c.L,
              format_bytes(size_t(korth * double(c.L))).c_str());
  std::printf("  remat: %.3f sbh linear + %.3f sbh in T x T terms (fp32) = %s per layer, x%lld = %s; in 16-bit it "
              "would be %s per layer\n",
              (total - quadratic) / sbh, quadratic / sbh, format_bytes(size_t(total)).c_str(), (long long)c.L,
              format_bytes(size_t(total * double(c.L))).c_str(), format_bytes(size_t(total / 2)).c_str());
  std::printf("  the differences: remat stores fp32 (4 bytes, Korthikanti counts 2); it keeps no dropout masks (Philox "
              "regenerates them: Korthikanti counts 1 byte per element, sbh + as^2b + sbh + sbh per layer); it keeps "
              "the softmax output once, pre-dropout (Korthikanti: softmax output and dropout output, 2as^2b + 2as^2b); "
              "the MLP is the model's own (%s: hidden %lld = %.3fh%s, Korthikanti assumes 4h with GELU); norms keep "
              "their statistics (%s)\n",
              arch_name(c.arch), (long long)c.mlp_hidden(), double(c.mlp_hidden()) / h,
              c.arch == Arch::Llama ? ", three projections and SwiGLU keeping gate, up and their product" : "",
              c.arch == Arch::Llama ? "rstd, s*b floats each" : "mean and rstd, s*b floats each");
  const double x_fp32 = double(tr.boundary_bytes), x16 = x_fp32 / 2;
  if (preset == "llama-7b") {
    std::printf("textbook figures (LLaMA-7B):\n");
    std::printf("  section 2, |x| at B=8, T=4096: 0.5 GB. remat: |x| = B*T*C = %.0f M elements at B=%lld, T=%lld: %s "
                "fp32, %s bf16; at B=8, T=4096 it is 134 M elements, 512 MiB fp32 -- the textbook's 0.5 GB is the fp32 "
                "size, 256 MiB in bf16. L|x| at B=8: 16 GiB fp32 (the textbook's ~16 GB)\n",
                b * s * h / 1e6, (long long)tr.B, (long long)tr.T, format_bytes(size_t(x_fp32)).c_str(),
                format_bytes(size_t(x16)).c_str());
    std::printf("  attention scores per block hT^2 = 32 x 4096^2 = 5.4e8 entries (~1 GB bf16) per sequence, x32 "
                "blocks ~ 32 GB: remat at B=%lld, T=%lld keeps %s of T x T terms per block (fp32), %s in all\n",
                (long long)tr.B, (long long)tr.T, format_bytes(size_t(quadratic)).c_str(),
                format_bytes(size_t(quadratic * double(c.L))).c_str());
    std::printf("  section 7, selective ~16 GB -> ~4 GB (~5%%), block ~1 GB (~33%%): see the frontier and "
                "--policy selective / --recompute block below; remat's figures are fp32 and whole-block\n");
  }
}

}  // namespace

void add_plan(CLI::App& root) {
  auto flags = std::make_shared<PlanFlags>();
  CLI::App* app = root.add_subcommand("plan", "Predict activation memory and recompute for strategies, print the "
                                              "frontier, or pick the plan with least recompute under --budget");
  PlanFlags& f = *flags;
  f.model.add_to(*app, kDefaultPreset);
  app->add_option("--batch", f.batch, "B: sequences per optimizer step, as in remat train")->capture_default_str();
  app->add_option("--micro-batch", f.micro_batch, "b: sequences per forward, whose activations are planned "
                                                   "(default: b = B)");
  app->add_option("--budget", f.budget, std::string("Activation byte budget of one micro-batch, e.g. 300MiB: print "
                                                    "the best plan for it and the remat train command that runs it; ") +
                                            kByteUnitsHelp);
  app->add_option("--recompute", f.strategies, "Price these strategies instead of the frontier");
  app->add_option("--policy", f.policy, "Selective recomputation inside stored blocks, a preset of the model: none | "
                                        "selective | gelu | norms (GPT-2) | swiglu | norms (LLaMA)")
      ->capture_default_str();
  app->add_option("--segment-replay", f.segment_replay, "With --recompute: how segments are replayed, boundaries "
                                                       "(least memory) or internals (least compute)")
      ->check(CLI::IsMember({"boundaries", "internals"}))->capture_default_str();
  app->add_flag("--json", f.json, "JSON output");
  app->callback([flags, app]() {
    PlanFlags& f = *flags;
    f.model.apply_threads();  // plan runs no kernel, but a bad --threads is still refused
    std::optional<size_t> budget;  // parsed first: a bad budget is a flag error, whatever the model
    const CLI::Option* budget_opt = app->get_option_no_throw("--budget");
    if (budget_opt && budget_opt->count() > 0) budget = parse_bytes(f.budget, "--budget");
    ModelConfig cfg = f.model.config();
    const int64_t T = f.model.seq(cfg);
    if (f.batch <= 0) throw Error("cli", "--batch must be positive, got " + std::to_string(f.batch), "e.g. --batch 8");
    const int64_t micro = f.micro_batch ? f.micro_batch : f.batch;
    if (micro <= 0 || f.batch % micro != 0)
      throw Error("cli", "--micro-batch " + std::to_string(micro) + " does not divide --batch " + std::to_string(f.batch),
                  "pick a divisor of the batch, e.g. --micro-batch " + std::to_string(f.batch / 2 > 0 ? f.batch / 2 : 1));
    check_sizes(cfg, micro, T, 0.0);  // plan runs nothing: any size that does not overflow
    const int L = int(cfg.L);
    const auto model = planner::shape_only_model(cfg);
    const NamePolicy policy = model->policy(f.policy);
    const autograd::Policy* pol = policy.keeps_all() ? nullptr : &policy;
    const planner::StepTrace trace = planner::trace_step(*model, micro, T, pol);
    std::vector<planner::Plan> plans;
    if (budget) {
      plans.push_back(planner::best_plan(trace, *budget));
    } else if (!f.strategies.empty()) {
      for (auto& s : f.strategies) {
        StrategySpec spec = parse_strategy(s, L, false, f.segment_replay == "internals");
        Schedule sch = make_schedule(spec, L);
        plans.push_back({spec, planner::simulate_memory(trace, sch), planner::predict_compute(trace, sch)});
      }
    } else {
      plans = planner::frontier(trace);
    }
    // After planning, so that a refused budget prints nothing but its error.
    if (!f.json) print_terms(pol ? planner::trace_step(*model, micro, T) : trace, *model, f.model.preset);
    nlohmann::json rows = nlohmann::json::array();
    if (!f.json)
      std::printf("remat plan: %s, B=%lld (micro-batch %lld), T=%lld; |x| = %s, one block's internals = %s\n"
                  "%-28s %14s %10s %12s %10s\n",
                  cfg.describe().c_str(), (long long)f.batch, (long long)micro, (long long)T,
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
    else if (budget)  // a complete command: pasted, it trains the model that was planned, as planned
      std::printf("use: remat train%s --batch %lld --micro-batch %lld --recompute %s --segment-replay %s --policy %s\n",
                  f.model.command_line(T).c_str(), (long long)f.batch, (long long)micro,
                  plans[0].spec.base_label().c_str(), plans[0].spec.replay_internals ? "internals" : "boundaries",
                  f.policy.c_str());
  });
}

}  // namespace remat::cli
