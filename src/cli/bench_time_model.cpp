// remat bench --time-model: the step-time overhead against store-everything of the planner's plans,
// measured, and predicted by the planner's two time models -- FLOPs (predict_compute) and this
// machine's calibration (plan_seconds) -- for one or several configs in one run. Nothing is priced
// here: every row is a StepPlan of the config's candidates, and its predictions are the plan's.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "cli/bench.h"
#include "core/record.h"
#include "core/stats.h"
#include "planner/calibrate.h"

namespace remat::cli {

std::vector<std::string> time_model_policies(const StepPlan* file_plan) {
  std::vector<std::string> names{"none", "selective"};
  if (file_plan)
    for (const std::string& n : file_plan->block_policy)
      if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  return names;
}

namespace {

std::string ratio_text(double r) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f", r);
  return b;
}

// One row of a config, its plan and what was measured of it.
struct TimeRow {
  std::string label;
  StepPlan plan;
  double step_ms = 0, measured = 0, lo = 0, hi = 0, flops = 0, calibrated = 0;
  bool checked = true;  // a prediction to check (not none, not none again)
};
struct TimeResult {
  TimeConfig c;
  std::vector<TimeRow> rows;
  std::string source;  // where the calibration came from
  double calib_s = 0, load0 = 0, load1 = 0;
  size_t budget = 0;
  std::string budget_plan;
};

// One config: block, sqrt, selective, the DP's plan at the memory midway between block and none (and
// a plan file's plan, when given), each a plan of one set of candidates (none, selective and the plan
// file's policies) priced by the calibration. The rows share one model and run interleaved, one step
// of each per round (the first row rotating), so that the machine's drift reaches them alike; a
// second `none` row measures the run-to-run spread of one strategy. Measured overheads are medians
// over rounds of the row's step over none's step in the same round.
TimeResult time_config(const BenchFlags& f, const TimeConfig& tc, const StepPlan* file_plan) {
  TimeResult res;
  res.c = tc;
  const ModelConfig& cfg = tc.cfg;
  const int L = int(cfg.L);
  const int64_t B = tc.B, T = tc.T;
  res.load0 = load_average();
  const std::vector<std::string> names = time_model_policies(file_plan);

  // The calibration: from the file (loaded and checked before any work), or measured now.
  planner::Calibration cal;
  if (tc.cal) {
    cal = *tc.cal;
    res.source = tc.calibration;
  } else {
    CalibrateOptions co;
    co.cfg = cfg;
    co.B = B;
    co.T = T;
    co.policies = names;
    co.repeats = int(std::clamp<int64_t>(f.steps, 3, 1000));  // as many rounds as the measurement, at least 3
    co.seed = f.seed + 1;  // another model and batch than the measured rows'
    co.clock = parse_clock(f.clock);
    const double t0 = now();
    cal = calibrate(co);
    res.calib_s = now() - t0;
    res.source = "measured in this run";
  }

  // The planner: one dry run per candidate, the DP's time the calibrated one.
  PlanTarget target;
  target.cfg = cfg;
  target.batch = target.micro = B;
  target.T = T;
  target.calibration = cal;
  const Candidates c = make_candidates(cfg, B, T, &cal, {}, names);
  auto strategy = [&](const std::string& label, const std::string& s, const std::string& policy) {
    const StrategySpec spec = parse_strategy(s, L, f.recompute_last, f.segment_replay == "internals");
    return TimeRow{label, row_plan(c, target, make_schedule(spec, L), {policy}, {cfg.attention})};
  };
  std::vector<TimeRow> rows{strategy("none", "none", "none"), strategy("block", "block", "none"),
                            strategy("sqrt", "sqrt", "none"), strategy("selective", "none", "selective")};
  res.budget = (rows[0].plan.activation_peak + rows[1].plan.activation_peak) / 2;
  rows.push_back({"budget plan", unpriced_plan(c, planner::optimal_plan(c.problem, res.budget), target)});
  res.budget_plan = rows.back().plan.summary;
  if (file_plan)
    rows.push_back({"plan", row_plan(c, target, file_plan->schedule, file_plan->block_policy, {cfg.attention})});
  TimeRow again = rows[0];
  again.label = "none (again)";
  rows.push_back(std::move(again));

  // Each row's step, from its plan.
  StepTimer timer(cfg, B, T, f.seed, parse_clock(f.clock));
  std::vector<std::vector<NamePolicy>> owned;
  std::vector<StepOptions> options;
  for (const TimeRow& r : rows) owned.push_back(named_block_policies(timer.model(), r.plan.block_policy));
  for (size_t i = 0; i < rows.size(); ++i) {
    StepOptions so;
    so.schedule = rows[i].plan.schedule;
    so.block_policy = policy_pointers(owned[i]);
    so.block_attention = rows[i].plan.block_attention;
    options.push_back(so);
  }
  std::vector<std::vector<double>> step_ms(rows.size()), ratio(rows.size());
  for (int64_t round = 0; round < f.warmup + f.steps; ++round) {
    std::vector<double> ms(rows.size());
    for (size_t k = 0; k < rows.size(); ++k) {
      const size_t i = (k + size_t(round)) % rows.size();
      ms[i] = timer.step(options[i]).step * 1e3;
    }
    if (round < f.warmup) continue;
    for (size_t i = 0; i < rows.size(); ++i) {
      step_ms[i].push_back(ms[i]);
      ratio[i].push_back(ms[i] / ms[0]);
    }
  }
  res.load1 = load_average();

  // The planner's predictions of each plan, against none's.
  auto flops = [](const StepPlan& p) { return p.compute.fwd + p.compute.bwd + p.compute.recompute; };
  const StepPlan& none = rows[0].plan;
  for (size_t i = 0; i < rows.size(); ++i) {
    TimeRow& r = rows[i];
    r.step_ms = median(step_ms[i]);
    r.measured = median(ratio[i]);
    r.lo = *std::min_element(ratio[i].begin(), ratio[i].end());
    r.hi = *std::max_element(ratio[i].begin(), ratio[i].end());
    r.flops = flops(r.plan) / flops(none);
    r.calibrated = *r.plan.seconds / *none.seconds;
    r.checked = i != 0 && i + 1 != rows.size();
  }
  res.rows = std::move(rows);
  return res;
}

}  // namespace

void run_time_model(const BenchFlags& f, const std::vector<TimeConfig>& configs, const StepPlan* file_plan,
                    const std::string& plan_file, const std::string& command) {
  const int threads = omp_get_max_threads();
  size_t w = 6;
  for (const TimeConfig& c : configs) w = std::max(w, c.label.size());
  const int cw = int(w);
  if (!f.json) {
    std::printf("command: %s\n", command.c_str());
    std::printf("remat bench --time-model: %zu config%s, %d threads, %s clock; per config: the calibration, then %lld "
                "rounds after %lld warm-up, rows interleaved; overheads against none; points: prediction minus "
                "measured\n",
                configs.size(), configs.size() == 1 ? "" : "s", threads, f.clock.c_str(), (long long)f.steps,
                (long long)f.warmup);
    if (file_plan)
      std::printf("plan %s: %s, attention %s (row \"plan\")\n", plan_file.c_str(), file_plan->summary.c_str(),
                  autograd::attention_kind_name(file_plan->cfg.attention));
    std::printf("%-*s  %-13s %10s %10s %9s %15s %9s %9s %9s %9s\n", cw, "config", "row", "act MiB", "median ms",
                "measured", "spread (min-max)", "FLOP", "calibr.", "FLOP pts", "cal. pts");
    std::fflush(stdout);
  }
  nlohmann::json out = nlohmann::json::array();
  std::vector<TimeResult> results;
  for (const TimeConfig& c : configs) {
    results.push_back(time_config(f, c, file_plan));
    const TimeResult& res = results.back();
    for (const TimeRow& r : res.rows) {
      const double fp = (r.flops - r.measured) * 100, cp = (r.calibrated - r.measured) * 100;
      if (f.json) {
        nlohmann::json j{{"row", r.label},
                         {"config_spec", c.label},
                         {"predicted_activation_bytes", r.plan.activation_peak},
                         {"step_ms_median", r.step_ms},
                         {"overhead_measured", r.measured},
                         {"overhead_measured_min", r.lo},
                         {"overhead_measured_max", r.hi},
                         {"overhead_flops", r.flops},
                         {"overhead_calibrated", r.calibrated},
                         {"flops_minus_measured_points", fp},
                         {"calibrated_minus_measured_points", cp},
                         {"schedule", record::to_json(r.plan.schedule)},  // as a plan file spells them
                         {"block_policy", r.plan.block_policy},
                         {"config", c.cfg.describe()},
                         {"batch", c.B},
                         {"seq", c.T},
                         {"threads", threads},
                         {"calibration", res.source},
                         {"clock", f.clock},
                         {"load_average", {res.load0, res.load1}}};
        if (r.label == "plan") j["plan_file"] = plan_file;
        out.push_back(j);
      } else {
        std::printf("%-*s  %-13s %10.2f %10.1f %9.3f %7.3f-%-7.3f %9.3f %9.3f %+9.1f %+9.1f\n", cw, c.label.c_str(),
                    r.label.c_str(), double(r.plan.activation_peak) / 1048576.0, r.step_ms, r.measured, r.lo, r.hi,
                    r.flops, r.calibrated, fp, cp);
      }
    }
    std::fflush(stdout);
  }
  if (f.json) {
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  // The worst error of each prediction, signed, and where.
  struct Worst {
    double points = 0;
    std::string where = "-";
  } worst_flops, worst_cal;
  std::string checked_rows, again;
  for (const TimeResult& res : results)
    for (const TimeRow& r : res.rows) {
      if (!r.checked) {
        if (r.label != "none")
          again += (again.empty() ? "" : ", ") + ratio_text(r.measured) + " (" + res.c.label + ")";
        continue;
      }
      if (&res == &results.front())
        checked_rows += (checked_rows.empty() ? "" : ", ") + r.label;
      for (auto [w, pred] : {std::pair<Worst*, double>{&worst_flops, r.flops}, {&worst_cal, r.calibrated}}) {
        const double pts = (pred - r.measured) * 100;
        if (w->where == "-" || std::abs(pts) > std::abs(w->points)) *w = {pts, res.c.label + " " + r.label};
      }
    }
  std::printf("worst error over %s, %s: FLOP %+.1f points (%s), calibrated %+.1f points (%s); none again measured %s\n",
              checked_rows.c_str(), configs.size() == 1 ? "one config" : ("all " + std::to_string(configs.size()) + " configs").c_str(),
              worst_flops.points, worst_flops.where.c_str(), worst_cal.points, worst_cal.where.c_str(), again.c_str());
  for (const TimeResult& res : results)
    std::printf("%-*s  %s, B=%lld, T=%lld, attention %s; calibration %s%s; load average %.2f -> %.2f; budget plan: %s "
                "at a budget of %.2f MiB (midway between block and none)\n",
                cw, res.c.label.c_str(), res.c.cfg.describe().c_str(), (long long)res.c.B, (long long)res.c.T,
                autograd::attention_kind_name(res.c.cfg.attention), res.source.c_str(),
                res.calib_s > 0 ? (" (" + std::to_string(int(res.calib_s + 0.5)) + " s)").c_str() : "", res.load0,
                res.load1, res.budget_plan.c_str(), double(res.budget) / 1048576.0);
}

}  // namespace remat::cli
