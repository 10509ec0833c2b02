// remat plan: the memory/compute frontier of a config beside the textbook strategies, and the fastest
// plan under a whole-step byte budget (planner/budget.h), with the `remat train` command that runs it.
// Runs nothing, so it prices models far larger than this machine can train.
#include <algorithm>
#include <functional>
#include <cmath>
#include <cstdio>
#include <optional>

#include "cli/cmd_plan_textbook.h"
#include "cli/cmd_train.h"
#include "cli/flags.h"
#include "planner/comm.h"
#include "planner/planner.h"
#include "core/error.h"
#include "dist/data_parallel.h"
#include "core/io_policy.h"
#include "checkpoint/policy.h"
#include "core/atomic_file.h"
#include "core/process_memory.h"
#include "planner/budget.h"
#include "planner/frontier.h"
#include "train/run_data.h"
#include "train/report.h"
#include "viz/svg.h"
#include "train/trainer.h"

namespace remat::cli {

namespace {
struct PlanFlags {
  ModelFlags model;
  int64_t batch = 8, micro_batch = 0;
  std::string budget, step_budget;
  std::vector<std::string> strategies;
  std::string policy = "none";
  std::string segment_replay = "boundaries";
  bool json = false;
  bool frontier = false;  // every frontier plan, not a sample of them
  std::string out, svg, data, data_format = "auto";
  std::string calibration;
  int64_t ranks = 1, zero = 0;
  std::string bandwidth, latency = "5us";
};
// "12.00 MiB (6.29 M elements, bf16)": one boundary |x| in bytes, elements and the residual stream's dtype.
std::string boundary_text(size_t bytes, const ModelConfig& c) {
  char b[96];
  const DType d = c.residual_dtype();
  std::snprintf(b, sizeof b, " (%.2f M elements, %s)", double(bytes) / double(dtype_size(d)) / 1e6, dtype_name(d));
  return format_bytes(bytes) + b;
}

// One row of the tables: a plan or a textbook strategy, with its predictions.
struct Row {
  std::string label;
  StepPlan plan;
  SvgPoint::Kind kind = SvgPoint::Kind::Frontier;
};

double flops(const planner::ComputePrediction& c) { return c.fwd + c.bwd + c.recompute; }

// The textbook strategies, priced like any plan: none, sqrt, uniform:K for a few K,
// block, selective (store everything, the attention scores dropped) and flash (store everything with
// flash attention).
std::vector<Row> textbook_rows(const Candidates& c, const Candidates* flash, const PlanTarget& t) {
  const int L = int(c.cfg.L);
  std::vector<Row> rows;
  auto add = [&](const Candidates& cc, const std::string& strategy, const std::string& policy, const std::string& label) {
    rows.push_back({label, price_strategy(cc, parse_strategy(strategy, L, false), policy, t), SvgPoint::Kind::Textbook});
  };
  add(c, "none", "none", "none");
  add(c, "sqrt", "none", "sqrt (" + std::to_string(parse_strategy("sqrt", L, false).segments.size()) + " segments)");
  const size_t sqrt_k = parse_strategy("sqrt", L, false).segments.size();
  for (int K : {2, 4, 8})
    if (K < L && size_t(K) != sqrt_k) add(c, "uniform:" + std::to_string(K), "none", "uniform:" + std::to_string(K));
  add(c, "block", "none", "block");
  const auto& names = c.problem.policy_names;
  if (std::find(names.begin(), names.end(), "selective") != names.end()) add(c, "none", "selective", "selective");
  if (flash) add(*flash, "none", "none", "flash");
  return rows;
}

// A plan's overhead is its FLOPs over store-everything's under the same kernels, the figure its plan
// file and `remat train` report too (one figure per plan everywhere).
std::string overhead_str(const StepPlan& p, double) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3fx", p.compute.overhead());
  return b;
}

nlohmann::json row_json(const Row& r, double) {
  nlohmann::json j = {{"label", r.label},
          {"kind", r.kind == SvgPoint::Kind::Textbook ? "textbook" : r.kind == SvgPoint::Kind::Chosen ? "chosen" : "frontier"},
          {"attention", attention_label(r.plan)},
          {"predicted_activation_bytes", r.plan.activation_peak},
          {"predicted_step_bytes", r.plan.step.peak_total},
          {"overhead_predicted", r.plan.compute.overhead()},
          {"predicted_flops", flops(r.plan.compute)},
          {"block_recomputes", r.plan.compute.block_recomputes}};
  if (r.plan.seconds) j["predicted_step_seconds"] = *r.plan.seconds;
  return j;
}

std::string seconds_str(const StepPlan& p) {
  if (!p.seconds) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.1f ms", *p.seconds * 1e3);
  return b;
}

// With a calibration, the calibrated step time beside the FLOP overhead ("-": a kernel it does not price).
void print_rows(const std::vector<Row>& rows, double base, bool calibrated) {
  std::printf("  %-58s %-6s %13s %13s %9s%s\n", "plan", "attn", "activations", "whole step", "overhead",
              calibrated ? "     step time" : "");
  for (const Row& r : rows) {
    char time[32] = "";
    if (calibrated) std::snprintf(time, sizeof time, " %13s", seconds_str(r.plan).c_str());
    // A plan that mixes kernels per block: "mixed" here, which blocks run which in its label (summary).
    const char* attn = r.plan.block_attention.empty() ? autograd::attention_kind_name(r.plan.cfg.attention) : "mixed";
    std::printf("  %-58s %-6s %13s %13s %9s%s\n", r.label.c_str(), attn,
                format_bytes(r.plan.activation_peak).c_str(), format_bytes(r.plan.step.peak_total).c_str(),
                overhead_str(r.plan, base).c_str(), time);
  }
}

}  // namespace

void add_plan(CLI::App& root) {
  auto flags = std::make_shared<PlanFlags>();
  CLI::App* app = root.add_subcommand("plan", "Print the memory/compute frontier of the optimal planner beside the "
                                              "textbook strategies, or the fastest plan under a whole-step --budget");
  PlanFlags& f = *flags;
  f.model.allow_auto_attention = true;
  f.model.add_to(*app, kDefaultPreset);
  f.model.add_shape_from(*app);
  add_shared(*app, "--batch", f.batch);
  add_shared(*app, "--micro-batch", f.micro_batch, "whose activations are planned");
  add_shared(*app, "--budget", f.budget, "print the fastest plan that fits and the remat train command that runs it");
  add_shared(*app, "--step-budget", f.step_budget, "print the fastest plan whose step fits and the remat train command that runs it");
  add_shared(*app, "--out", f.out, "with --budget, the plan (JSON), for remat train --plan");
  app->add_flag("--frontier", f.frontier, "Print every plan of the frontier (default: a sample of at most 12)");
  add_shared(*app, "--svg", f.svg, "the frontier, the textbook strategies and the chosen plan");
  add_shared(*app, "--data", f.data, "what remat train will read: its bytes count in the whole step (default: the built-in corpus)");
  add_shared(*app, "--data-format", f.data_format, "of --data");
  add_shared(*app, "--recompute", f.strategies, "price these strategies instead of the frontier (default: the frontier)");
  add_shared(*app, "--policy", f.policy, "with --recompute");
  add_shared(*app, "--segment-replay", f.segment_replay, "with --recompute")->check(CLI::IsMember({"boundaries", "internals"}));
  add_shared(*app, "--calibration", f.calibration, "plan by its time, and print each plan's calibrated step time");
  add_shared_switch(*app, "--json", f.json);
  add_shared(*app, "--ranks", f.ranks, "also print the model state per rank under each ZeRO stage (Rajbhandari et al. 2020's count beside remat's)");
  add_shared(*app, "--zero", f.zero, "with --ranks, the stage to mark: 0 to 3 are priced, 0, 1 and 3 trained");
  app->add_option("--bandwidth", f.bandwidth, "With --ranks: each rank's link, e.g. 25Gbit or 10GB (per second): also "
                                              "predict the communication and step time per rank (latency-bandwidth model)");
  app->add_option("--latency", f.latency, "With --bandwidth: the latency per message, e.g. 5us")->capture_default_str();
  app->callback([flags, app]() {
    PlanFlags& f = *flags;
    f.model.apply_threads();  // plan runs no kernel, but a bad --threads is still refused
    auto given = [&](const char* name) {
      const CLI::Option* o = app->get_option_no_throw(name);
      return o && o->count() > 0;
    };
    std::optional<size_t> budget;  // parsed first: a bad budget is a flag error, whatever the model
    if (given("--budget") && given("--step-budget"))
      throw Error("cli", "--budget and --step-budget cannot be combined",
                  "--budget bounds the process, --step-budget the accounted step alone: give one");
    const bool step_only = given("--step-budget");  // the step alone, not the process
    const std::string budget_flag = step_only ? "--step-budget" : "--budget";
    if (step_only) f.budget = f.step_budget;
    if (given("--budget") || step_only) budget = parse_bytes(f.budget, budget_flag);
    if (!budget && given("--out"))
      throw Error("cli", "--out writes the plan chosen under --budget", "add --budget SIZE, e.g. --budget 2GiB");
    if (budget && !f.strategies.empty())
      throw Error("cli", "--budget and --recompute cannot be combined: the planner chooses the strategy",
                  "drop --recompute to plan under the budget, or drop --budget to price the strategies");
    if (given("--policy") && f.strategies.empty())
      throw Error("cli", "--policy applies to --recompute: the planner weighs every policy of the model per block",
                  "drop --policy, or price a strategy with --recompute S --policy P");
    if (!f.strategies.empty() && given("--calibration"))
      throw Error("cli", "--calibration is the planner's time model; --recompute prices fixed strategies by FLOPs",
                  "drop --recompute to plan with the calibration, or compare strategies by calibrated time with remat "
                  "bench --time-model --calibration FILE");
    if (!f.strategies.empty() && f.model.attention_auto())
      throw Error("cli", "--attention auto lets the planner choose the kernel; --recompute prices fixed strategies",
                  "use --attention naive or flash with --recompute");
    if (given("--ranks") && (f.ranks < 1 || f.ranks > 1000000))
      throw Error("cli", "--ranks must be between 1 and 1000000, got " + std::to_string(f.ranks), "e.g. --ranks 8");
    if (f.zero < 0 || f.zero > 3) throw Error("cli", "--zero must be 0, 1, 2 or 3, got " + std::to_string(f.zero), "e.g. --zero 1");
    if (given("--zero") && !given("--ranks")) throw Error("cli", "--zero needs --ranks", "e.g. --ranks 8 --zero 1");
    if ((given("--bandwidth") || given("--latency")) && !given("--ranks"))
      throw Error("cli", std::string(given("--bandwidth") ? "--bandwidth" : "--latency") + " needs --ranks",
                  "e.g. --ranks 8 --bandwidth 25Gbit");
    if (given("--latency") && !given("--bandwidth")) throw Error("cli", "--latency needs --bandwidth", "e.g. --bandwidth 25Gbit");
    std::optional<planner::Link> link;
    if (given("--bandwidth"))
      link = planner::Link{planner::parse_bandwidth(f.bandwidth, "--bandwidth"), planner::parse_latency(f.latency, "--latency")};
    if (given("--ranks") && f.json)
      throw Error("cli", "--json with --ranks is not supported yet: the --ranks tables are text",
                  "drop --ranks, or drop --json");
    if (given("--ranks") && budget && f.zero == 2)
      throw Error("cli", budget_flag + " with --zero 2: remat trains stages 0, 1 and 3, so it plans those; stage 2 is "
                         "priced in the --ranks tables only",
                  "use --zero 0, 1 or 3 with --budget");
    // With --ranks and --budget, the budget is one rank's: each runs --batch / --ranks sequences a step.
    if (given("--ranks") && budget && f.batch % f.ranks != 0)
      throw Error("cli", "--batch " + std::to_string(f.batch) + " does not split over --ranks " + std::to_string(f.ranks),
                  "give a --batch that --ranks divides, e.g. --batch " + std::to_string(f.ranks * 4));
    const int64_t plan_batch = given("--ranks") && budget ? f.batch / f.ranks : f.batch;
    // Before any work (core/io_policy.h). No - for stdout: the table goes there.
    IoPolicy().input(f.data, "--data").input(f.calibration, "--calibration").output(f.out, "--out").output(f.svg, "--svg").check();
    ModelConfig cfg = f.model.config();
    const int64_t T = f.model.seq(cfg);
    if (f.batch <= 0) throw Error("cli", "--batch must be positive, got " + std::to_string(f.batch), "e.g. --batch 8");
    const int64_t micro = f.micro_batch ? f.micro_batch : plan_batch;
    if (micro <= 0 || plan_batch % micro != 0)
      throw Error("cli", "--micro-batch " + std::to_string(micro) + " does not divide " +
                             (plan_batch == f.batch ? "--batch " + std::to_string(f.batch)
                                                    : "a rank's share of the batch, " + std::to_string(plan_batch)),
                  "pick a divisor of it, e.g. --micro-batch " + std::to_string(plan_batch / 2 > 0 ? plan_batch / 2 : 1));
    check_sizes(cfg, micro, T, 0.0);  // plan runs nothing: any size that does not overflow
    const int L = int(cfg.L);
    if (f.strategies.empty()) planner::check_plannable(L);  // before tracing a chain too long to plan
    const auto model = planner::shape_only_model(cfg);

    if (!f.strategies.empty()) {  // price the strategies asked for
      const NamePolicy policy = model->policy(f.policy);
      const autograd::Policy* pol = policy.keeps_all() ? nullptr : &policy;
      const planner::StepTrace trace = planner::trace_step(*model, micro, T, pol);
      struct Priced {
        StrategySpec spec;
        planner::MemoryPrediction memory;
        planner::ComputePrediction compute;
      };
      std::vector<Priced> plans;
      for (auto& s : f.strategies) {
        StrategySpec spec = parse_strategy(s, L, false, f.segment_replay == "internals");
        Schedule sch = make_schedule(spec, L);
        plans.push_back({spec, planner::simulate_memory(trace, sch), planner::predict_compute(trace, sch)});
      }
      if (!f.json) print_terms(pol ? planner::trace_step(*model, micro, T) : trace, *model, f.model.preset);
      nlohmann::json rows = nlohmann::json::array();
      if (!f.json)
        std::printf("remat plan: %s, B=%lld (micro-batch %lld), T=%lld; |x| = %s, one block's internals = %s\n"
                    "%-28s %14s %10s %12s %10s\n",
                    cfg.describe().c_str(), (long long)f.batch, (long long)micro, (long long)T,
                    boundary_text(plans[0].memory.boundary_bytes, cfg).c_str(), format_bytes(plans[0].memory.block_bytes).c_str(),
                    "strategy", "activation", "overhead", "recomputes", "fwd-eq");
      for (const auto& p : plans) {
        if (f.json)
          rows.push_back({{"strategy", p.spec.label()},
                          {"predicted_activation_bytes", p.memory.peak_activation},
                          {"overhead_predicted", p.compute.overhead()},
                          {"block_recomputes", p.compute.block_recomputes},
                          {"forward_equivalents", p.compute.forward_equivalents()}});
        else
          std::printf("%-28s %14s %9.3fx %12d %10.2f\n", p.spec.label().c_str(), format_bytes(p.memory.peak_activation).c_str(),
                      p.compute.overhead(), p.compute.block_recomputes, p.compute.forward_equivalents());
      }
      if (f.json) std::printf("%s\n", rows.dump(2).c_str());
      return;
    }

    TrainOptions data_opts;
    data_opts.data = f.data;
    data_opts.data_format = f.data_format;
    const DataFootprint data = data_footprint(data_opts);
    PlanTarget target{cfg, plan_batch, micro, T, data.accounted, f.model.attention_auto(), std::nullopt};
    // --budget is the process's, as in train: the step gets what the runtime, the mapped token files
    // and the allocator's rounding leave of it.
    const ProcessFixed fixed = process_fixed(data.mapped);
    std::optional<size_t> step_budget;
    if (budget) {
      if (!step_only && step_budget_within(*budget, fixed) == 0)
        throw Error("plan", "--budget " + format_bytes(*budget) + " is below what the process needs before any step: " +
                                fixed_description(fixed) + " = " + format_bytes(predicted_process(fixed, 0)),
                    "give --budget more than " + format_bytes(predicted_process(fixed, 0)));
      step_budget = step_only ? *budget : step_budget_within(*budget, fixed);
      if (!step_only) target.process = fixed;
    }
    target.per_block_attention = target.allow_flash;  // --attention auto: the DP may choose the kernel per block
    // With --ranks and --budget: one rank's step, with its reduction buffers and its shard of AdamW.
    if (plan_batch != f.batch)
      target.rank = dist::rank_share_to_plan(int(f.ranks), int(f.zero), plan_batch / micro, true);
    if (given("--calibration")) {
      target.calibration = calibration_for(f.calibration, cfg, micro, T);
      check_calibrated_target(target);
    }
    const planner::Calibration* cal = target.calibration ? &*target.calibration : nullptr;
    // The candidates and frontier of each kernel the planner may use, computed once: the budget's plan
    // starts from them, and the frontier rows show them.
    const std::vector<KernelPlans> kernels = plan_kernels(target);
    std::optional<StepPlan> chosen;
    std::optional<Error> refused;  // with --svg, the picture is drawn (the budget and the least marked) before it is thrown
    bool hold = true;  // ZeRO-3's gather policy, planned with the budget
    std::string gather_why;
    if (budget) {
      try {
        // before any output: a refused budget prints only its error
        if (plan_batch != f.batch && f.zero == 3) {
          // With --bandwidth, the policies are weighed by the step's time: compute (calibrated, or its
          // FLOPs at this machine's sgemm rate) plus the all-gathers and reductions at the link, none
          // of them hidden; else by compute alone.
          std::function<double(const StepPlan&, bool)> cost;
          const int64_t rank_accum = plan_batch / micro;
          const double rate = link && !cal ? sgemm_rate() : 0;
          if (link)
            cost = [&, rate](const StepPlan& p, bool h) {
              const double compute = p.seconds ? *p.seconds : step_flops(p.compute, rank_accum) / rate;
              return compute + planner::comm_per_step(p.cfg, 3, p.schedule, rank_accum, h).seconds(int(f.ranks), *link);
            };
          const RankBudgetPlan rp = plan_rank_budget(target, *step_budget, int(f.ranks), 3, rank_accum, true, std::nullopt, cost);
          chosen = rp.plan;
          hold = rp.hold;
          auto show = [&](const std::optional<double>& c) {
            if (!c) return std::string("does not fit");
            char b[64];
            if (link) std::snprintf(b, sizeof b, "%.4g s", *c);
            else std::snprintf(b, sizeof b, "%.4g %s", *c, cal ? "s" : "FLOPs");
            return std::string(b);
          };
          gather_why = "gather policy: hold " + show(rp.hold_cost) + ", regather " + show(rp.regather_cost) +
                       (link ? " (compute plus every collective at --bandwidth, none hidden)" : " (compute alone; --bandwidth adds the collectives)");
        } else {
          chosen = plan_for_budget(target, *step_budget, kernels);
        }
      } catch (const Error& e) {
        if (f.svg.empty()) throw;
        refused = e;
      }
    }

    const Candidates& cands = kernels.front().candidates;
    std::optional<Candidates> own_flash;  // flash attention's textbook row, when the planner does not weigh flash
    const Candidates* flash_cands = kernels.size() > 1 ? &kernels[1].candidates : nullptr;
    if (!flash_cands && cfg.attention != autograd::AttentionKind::Flash) {
      ModelConfig fc = cfg;
      fc.attention = autograd::AttentionKind::Flash;
      flash_cands = &own_flash.emplace(make_candidates(fc, micro, T));
    }
    const std::vector<Row> textbook = textbook_rows(cands, flash_cands, target);
    const double base = flops(textbook.front().plan.compute);  // none, with the model's kernel

    // The frontier on what it is drawn against: the whole step and the planner's cost (planner/frontier.h).
    std::vector<Row> frontier;
    for (StepPlan& sp : step_frontier(target, kernels)) frontier.push_back({sp.summary, std::move(sp), SvgPoint::Kind::Frontier});
    // Rows shown: all with --frontier, else at most 12 spread over the frontier (both ends kept).
    std::vector<Row> shown;
    const size_t limit = f.frontier ? frontier.size() : std::min<size_t>(12, frontier.size());
    for (size_t k = 0; k < limit; ++k)
      shown.push_back(frontier[limit == frontier.size() ? k : (limit == 1 ? 0 : k * (frontier.size() - 1) / (limit - 1))]);

    const std::string title = cfg.describe() + ", B=" + std::to_string(f.batch) + " (micro-batch " +
                              std::to_string(micro) + "), T=" + std::to_string(T);
    std::string use;
    if (chosen) {
      // A complete command: pasted, it trains the model that was planned, as planned. The plan file
      // carries any plan; a named strategy is spelled as such; else train plans the same again.
      std::string how = f.out.empty() ? short_spelling(*chosen) : "--plan " + f.out;
      std::string model_flags = f.model.command_line(T);
      // A plan holds for the thread count it was priced at (the plan file says so): spelled when a
      // calibration or --threads chose it, else it is this process's default, which train gets too.
      if (chosen->threads > 0 && (cal || given("--threads"))) model_flags += " --threads " + std::to_string(chosen->threads);
      if (how.empty()) {  // no short spelling (a kernel per block has none): train plans the same again
        how = budget_flag + " " + shell_quoted(f.budget) + (cal ? " --calibration " + shell_quoted(f.calibration) : "");
        if (target.allow_flash) model_flags += " --attention auto";
      } else if (target.allow_flash || chosen->cfg.attention != cfg.attention) {
        model_flags += std::string(" --attention ") + autograd::attention_kind_name(chosen->cfg.attention);
      }
      const std::string launch =
          plan_batch != f.batch ? "mpirun -np " + std::to_string(f.ranks) + " remat train" : std::string("remat train");
      const std::string ranks_flags = plan_batch != f.batch ? " --zero " + std::to_string(f.zero) +
                                                                  (f.zero == 3 ? " " + gather_flag(hold) : "")
                                                            : "";
      use = launch + model_flags + ranks_flags + " --batch " + std::to_string(f.batch) + " --micro-batch " +
            std::to_string(micro) + (f.data.empty() ? "" : " --data " + f.data) +
            (f.data_format != "auto" ? " --data-format " + f.data_format : "") + " " + how;
      if (!f.out.empty()) write_plan_file(f.out, *chosen);
    }
    if (!f.svg.empty()) {
      // y: the planner's cost as it ranks plans, calibrated seconds of one optimizer step or FLOPs
      // relative to store-everything's (a plan the calibration cannot price is left out).
      const double base_cost = plan_cost(textbook.front().plan);
      FrontierOptions fo;
      fo.title = "remat plan: " + title;
      fo.cost = cal ? FrontierOptions::Cost::Seconds : FrontierOptions::Cost::Ratio;
      fo.cost_title = cal ? "predicted seconds of one optimizer step (calibrated)"
                          : std::string("predicted FLOPs / store-everything's (") +
                                autograd::attention_kind_name(cfg.attention) + " attention)";
      fo.bytes_title = "predicted whole-step peak (parameters, gradients, AdamW, data, activations, workspace)";
      if (budget) fo.budget = double(*step_budget), fo.budget_met = !refused;
      std::vector<SvgPoint> pts;
      const auto add = [&](const StepPlan& p, const std::string& label, SvgPoint::Kind kind) {
        if (cal && !p.seconds) return;
        pts.push_back({double(p.step.peak_total), cal ? *p.seconds : plan_cost(p) / base_cost, label, kind});
      };
      for (const Row& r : frontier) add(r.plan, r.label, SvgPoint::Kind::Frontier);
      for (const Row& r : textbook) add(r.plan, r.label, SvgPoint::Kind::Textbook);
      if (chosen) add(*chosen, "chosen: " + chosen->summary, SvgPoint::Kind::Chosen);
      if (refused)  // the frontier's first plan: the least whole-step peak, the one the refusal names
        add(frontier.front().plan, "least whole-step peak " + format_bytes(frontier.front().plan.step.peak_total) + ": " +
                                       frontier.front().label, SvgPoint::Kind::Least);
      write_file_atomic(f.svg, frontier_svg(pts, fo));
      if (refused) {
        std::printf("frontier drawn in %s, with the budget and the least whole-step peak marked\n", f.svg.c_str());
        std::fflush(stdout);
        throw *refused;
      }
    }

    if (f.json) {
      nlohmann::json j;
      j["model"] = title;
      j["frontier"] = nlohmann::json::array();
      for (const Row& r : shown) j["frontier"].push_back(row_json(r, base));
      j["textbook"] = nlohmann::json::array();
      for (const Row& r : textbook) j["textbook"].push_back(row_json(r, base));
      if (chosen) {
        j["plan"] = plan_to_json(*chosen);
        j["use"] = use;
      }
      std::printf("%s\n", j.dump(2).c_str());
      return;
    }
    print_terms(cands.problem.traces[0], *model, f.model.preset);
    if (given("--ranks")) print_model_state_per_rank(cfg, int(f.ranks), int(f.zero));
    if (given("--ranks") && f.zero == 3) print_zero3_gathers(cfg, int(f.ranks));
    if (link) print_step_time_per_rank(cfg, int(f.ranks), int(f.zero), micro, T, f.batch / micro, *link, f.bandwidth, f.latency);
    if (f.model.preset == "gpt3-175b") print_self_test_a(cands, target);
    std::printf("remat plan: %s; |x| = %s; candidates per block: %s%s\n", title.c_str(),
                boundary_text(cands.problem.traces[0].boundary_bytes, cands.cfg).c_str(), [&] {
                  std::string n;
                  for (const auto& p : cands.problem.policy_names) n += (n.empty() ? "" : ", ") + p;
                  return n;
                }().c_str(), target.allow_flash ? "; attention naive or flash, per block" : "");
    std::printf("whole step = every accounted byte (model state: parameters, gradients and AdamW moments %s; "
                "data %s; activations, their gradients, transients, workspace); overhead = predicted FLOPs / "
                "store-everything's under the same attention kernels\n",
                format_bytes(textbook.front().plan.step.persistent).c_str(), format_bytes(target.data_bytes).c_str());
    if (cal)
      std::printf("planned by calibrated time: %s (%s clock, %d threads); step time = predicted seconds of one "
                  "optimizer step\n",
                  f.calibration.c_str(), cal->clock.c_str(), cal->threads);
    std::printf("textbook strategies:\n");
    print_rows(textbook, base, cal);
    std::printf("optimal frontier (%zu plans%s):\n", frontier.size(),
                shown.size() < frontier.size() ? (", " + std::to_string(shown.size()) + " shown; --frontier for all").c_str() : "");
    print_rows(shown, base, cal);
    if (chosen) {
      const std::string share = step_only ? "whole step"
                                          : "the process: " + fixed_description(fixed) + "; the step gets " +
                                                format_bytes(*step_budget);
      std::printf("plan for %s %s (%s): %s, attention %s%s\n", budget_flag.c_str(), format_bytes(*budget).c_str(),
                  share.c_str(),
                  chosen->summary.c_str(), attention_label(*chosen).c_str(),
                  plan_batch != f.batch && f.zero == 3 ? (", " + gather_flag(hold)).c_str() : "");
      if (!gather_why.empty()) std::printf("%s\n", gather_why.c_str());
      std::string time;
      if (chosen->seconds && textbook.front().plan.seconds)
        time = ", step time " + seconds_str(*chosen) + " calibrated (" +
               [&] {
                 char b[48];
                 std::snprintf(b, sizeof b, "%.3fx none's %.1f ms", *chosen->seconds / *textbook.front().plan.seconds,
                               *textbook.front().plan.seconds * 1e3);
                 return std::string(b);
               }() + ")";
      std::printf("  predicted: whole step %s (activations alone %s), process %s, overhead %s%s\n",
                  format_bytes(chosen->step.peak_total).c_str(), format_bytes(chosen->activation_peak).c_str(),
                  format_bytes(predicted_process(fixed, chosen->step.peak_total)).c_str(),
                  overhead_str(*chosen, base).c_str(), time.c_str());
      if (!f.out.empty()) std::printf("plan written to %s\n", f.out.c_str());
      std::printf("use: %s\n", use.c_str());
    }
    if (!f.svg.empty()) std::printf("frontier drawn in %s\n", f.svg.c_str());
  });
}

}  // namespace remat::cli
