// remat bench: one run over checkpoint strategies for one config. Medians over timed steps after a
// warm-up, measured activation peaks beside the planner's, and overheads against `none`.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <vector>

#include "cli/flags.h"
#include "core/error.h"
#include "kernels/gemm.h"
#include "planner/calibration.h"
#include "planner/optimal.h"
#include "planner/planner.h"
#include "train/calibrate.h"
#include "train/report.h"

namespace remat::cli {

namespace {
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
  std::string calibration, clock = "wall";
};

// A bench row: "[flash+|naive+]STRATEGY[+POLICY]", e.g. "selective", "flash+block", "block+gelu".
struct RowSpec {
  std::string label, strategy = "none", policy = "none";
  std::optional<autograd::AttentionKind> attention;
};
bool looks_like_strategy(const std::string& tok) {
  for (const char* s : {"none", "all", "block", "sqrt"})
    if (tok == s) return true;
  return tok.rfind("uniform:", 0) == 0 || tok.rfind("segments:", 0) == 0;
}

RowSpec parse_row(const std::string& text, const Model& model) {
  RowSpec r;
  r.label = text;
  std::stringstream ss(text);
  std::string tok;
  bool have_strategy = false, have_policy = false, have_attention = false;
  std::string policies;
  for (const std::string& n : model.policy_names()) policies += (policies.empty() ? "" : ", ") + n;
  const std::string example = "write e.g. none, flash+block or block+selective";
  if (text.empty()) throw Error("bench", "an empty --recompute row", example);
  while (std::getline(ss, tok, '+')) {
    if (tok == "flash" || tok == "naive") {
      if (have_attention) throw Error("bench", "row '" + text + "' names two attention kernels", example);
      r.attention = tok == "flash" ? autograd::AttentionKind::Flash : autograd::AttentionKind::Naive;
      have_attention = true;
    } else if (tok != "none" && model.has_policy(tok)) {
      if (have_policy) throw Error("bench", "row '" + text + "' names two policies", example);
      r.policy = tok;
      have_policy = true;
    } else if (looks_like_strategy(tok) || (!have_strategy && tok.find(':') != std::string::npos)) {
      if (have_strategy) throw Error("bench", "row '" + text + "' names two strategies", example);
      r.strategy = tok;
      have_strategy = true;
    } else {
      throw Error("bench",
                  "'" + tok + "' in row '" + text + "' is neither a strategy (none, all, block, sqrt, uniform:K, "
                  "segments:a,b,...) nor a policy of " + arch_name(model.config().arch) + " (" + policies + ")",
                  example);
    }
  }
  return r;
}

// Per-op wall time of one step, as the median over the timed steps (one slow step on a busy machine
// must not inflate the table), slowest first.
nlohmann::json profile_json(const std::vector<autograd::OpProfile>& steps) {
  std::map<std::string, std::vector<autograd::OpProfile::Entry>> per_op;
  for (const auto& p : steps)
    for (const auto& [key, e] : p.ops) per_op[key].push_back(e);
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  };
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& [key, es] : per_op) {
    auto med = [&](auto field) {
      std::vector<double> v;
      for (const auto& e : es) v.push_back(double(field(e)));
      return median(v);
    };
    const double fwd = med([](const auto& e) { return e.fwd_s; }), rec = med([](const auto& e) { return e.rec_s; }),
                 bwd = med([](const auto& e) { return e.bwd_s; });
    const double fwd_flops = med([](const auto& e) { return e.fwd_flops; });
    const double bwd_flops = med([](const auto& e) { return e.bwd_flops; });
    nlohmann::json r;
    r["op"] = key;
    r["calls_per_step"] = med([](const auto& e) { return e.calls; });
    r["forward_ms"] = fwd * 1e3;
    r["recompute_ms"] = rec * 1e3;
    r["backward_ms"] = bwd * 1e3;
    r["total_ms"] = (fwd + rec + bwd) * 1e3;
    r["forward_gflops"] = fwd > 0 ? fwd_flops / fwd / 1e9 : 0.0;
    r["backward_gflops"] = bwd > 0 ? bwd_flops / bwd / 1e9 : 0.0;
    rows.push_back(r);
  }
  std::sort(rows.begin(), rows.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
    return a["total_ms"].get<double>() > b["total_ms"].get<double>();
  });
  return rows;
}

void print_profile(const nlohmann::json& rows, double step_ms) {
  std::printf("  %-32s %6s %9s %9s %9s %9s %6s %9s %9s\n", "op (per step)", "calls", "fwd ms", "recomp ms",
              "bwd ms", "total ms", "share", "fwd GF/s", "bwd GF/s");
  double sum = 0;
  for (const auto& r : rows) {
    const double tot = r["total_ms"].get<double>();
    sum += tot;
    std::printf("  %-32s %6.0f %9.2f %9.2f %9.2f %9.2f %5.1f%% %9.1f %9.1f\n", r["op"].get<std::string>().c_str(),
                r["calls_per_step"].get<double>(), r["forward_ms"].get<double>(), r["recompute_ms"].get<double>(),
                r["backward_ms"].get<double>(), tot, 100.0 * tot / step_ms, r["forward_gflops"].get<double>(),
                r["backward_gflops"].get<double>());
  }
  std::printf("  %-32s %6s %9s %9s %9s %9.2f %5.1f%%  (sum of per-op medians; the rest of the step is bookkeeping)\n", "all ops", "", "",
              "", "", sum, 100.0 * sum / step_ms);
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// The fp32 GEMM rate of this machine at a GPT-sized shape, measured now (GFLOP/s).
double measure_gemm_peak() {
  const int64_t M = 2048, K = 768, N = 3072;
  Tensor a = Tensor::zeros({M, K}, Category::Workspace, "bench.gemm.a");
  Tensor b = Tensor::zeros({K, N}, Category::Workspace, "bench.gemm.b");
  Tensor c = Tensor::zeros({M, N}, Category::Workspace, "bench.gemm.c");
  a.fill(0.5f);
  b.fill(0.25f);
  std::vector<double> t;
  for (int r = 0; r < 12; ++r) {
    double t0 = now();
    kernels::sgemm(false, false, M, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f, c.data(), N);
    t.push_back(now() - t0);
  }
  std::sort(t.begin(), t.end());
  return 2.0 * M * N * K / t[t.size() / 2] / 1e9;
}

// The machine's load, as /proc/loadavg's first figure (the 1-minute average), or -1.
double load_average() {
  std::ifstream f("/proc/loadavg");
  double l = -1;
  f >> l;
  return f ? l : -1.0;
}

// remat bench --time-model: in one run, the step-time overhead against store-everything of block,
// sqrt, selective and the DP's plan at the memory midway between block and none, measured, predicted
// from FLOPs and predicted from the calibration, side by side. The rows share one model and run
// interleaved, one step of each per round (the first row rotating), so that the machine's drift
// reaches them alike; a second `none` row measures the run-to-run spread of one strategy. Measured
// overheads are medians over rounds of the row's step over none's step in the same round.
void run_time_model(const BenchFlags& f, const ModelConfig& cfg, int64_t T) {
  const int L = int(cfg.L);
  const int64_t B = f.batch;
  const int threads = omp_get_max_threads();
  const double load0 = load_average();
  const std::vector<std::string> names{"none", "selective"};

  // The calibration: from the file (checked against this run), or measured now.
  planner::Calibration cal;
  std::string source;
  double calib_s = 0;
  if (!f.calibration.empty()) {
    cal = planner::load_calibration(f.calibration);
    planner::check_calibration(cal, cfg, B, T, threads, f.clock, f.calibration);
    planner::calibration_indices(cal, names);  // throws naming a missing policy
    source = f.calibration;
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
    calib_s = now() - t0;
    source = "measured in this run";
  }

  // The plan problem: one dry run per candidate policy; the DP's time is the calibrated one.
  const auto dry = planner::shape_only_model(cfg);
  std::vector<NamePolicy> policies;
  for (const std::string& n : names) policies.push_back(dry->policy(n));
  planner::PlanProblem pp;
  for (const NamePolicy& p : policies) pp.traces.push_back(planner::trace_step(*dry, B, T, p.keeps_all() ? nullptr : &p));
  pp.policy_names = names;
  pp.time = planner::calibrated_time(cal, names);
  const std::vector<int> cal_idx = planner::calibration_indices(cal, names);

  struct Row {
    std::string label;
    Schedule schedule;
    std::vector<int> policy;  // per block, an index into names
    std::vector<double> step_ms, ratio;
  };
  auto schedule_of = [&](const std::string& s) {
    return make_schedule(parse_strategy(s, L, f.recompute_last, f.segment_replay == "internals"), L);
  };
  const std::vector<int> all_none(size_t(L), 0), all_selective(size_t(L), 1);
  std::vector<Row> rows{{"none", schedule_of("none"), all_none, {}, {}},
                        {"block", schedule_of("block"), all_none, {}, {}},
                        {"sqrt", schedule_of("sqrt"), all_none, {}, {}},
                        {"selective", schedule_of("none"), all_selective, {}, {}}};
  const auto peak = [&](const Schedule& s, const std::vector<int>& pol) {
    return planner::simulate_memory(planner::splice(pp.traces, pol), s).peak_activation;
  };
  const size_t budget = (peak(rows[0].schedule, all_none) + peak(rows[1].schedule, all_none)) / 2;
  const planner::ChainPlan plan = planner::optimal_plan(pp, budget);
  rows.push_back({"budget plan", plan.schedule, plan.block_policy, {}, {}});
  rows.push_back({"none (again)", rows[0].schedule, all_none, {}, {}});

  StepTimer timer(cfg, B, T, f.seed, parse_clock(f.clock));
  std::vector<std::vector<const autograd::Policy*>> block_policy;
  for (const Row& r : rows) {
    std::vector<const autograd::Policy*> bp;
    for (int p : r.policy) bp.push_back(policies[size_t(p)].keeps_all() ? nullptr : &policies[size_t(p)]);
    block_policy.push_back(bp);
  }
  for (int64_t round = 0; round < f.warmup + f.steps; ++round) {
    std::vector<double> ms(rows.size());
    for (size_t k = 0; k < rows.size(); ++k) {
      const size_t i = (k + size_t(round)) % rows.size();
      StepOptions so;
      so.schedule = rows[i].schedule;
      so.block_policy = block_policy[i];
      ms[i] = timer.step(so).step * 1e3;
    }
    if (round < f.warmup) continue;
    for (size_t i = 0; i < rows.size(); ++i) {
      rows[i].step_ms.push_back(ms[i]);
      rows[i].ratio.push_back(ms[i] / ms[0]);
    }
  }
  const double load1 = load_average();

  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  };
  auto flops = [&](const Row& r) {
    const planner::ComputePrediction c = planner::predict_compute(planner::splice(pp.traces, r.policy), r.schedule);
    return c.fwd + c.bwd + c.recompute;
  };
  auto predicted = [&](const Row& r) {
    std::vector<int> ci;
    for (int p : r.policy) ci.push_back(cal_idx[size_t(p)]);
    return planner::predict_time(cal, r.schedule, ci).step;
  };
  const double none_flops = flops(rows[0]), none_pred = predicted(rows[0]);
  nlohmann::json out = nlohmann::json::array();
  if (!f.json) {
    std::printf("remat bench --time-model: %s, B=%lld, T=%lld, %d threads, attention %s; %lld rounds after %lld "
                "warm-up, rows interleaved, %s clock; calibration %s%s; load average %.2f -> %.2f\n",
                cfg.describe().c_str(), (long long)B, (long long)T, threads,
                autograd::attention_kind_name(cfg.attention), (long long)f.steps, (long long)f.warmup, f.clock.c_str(), source.c_str(),
                calib_s > 0 ? (" (" + std::to_string(int(calib_s + 0.5)) + " s)").c_str() : "", load0, load1);
    std::printf("budget plan: %s at a budget of %.2f MiB (midway between block and none)\n", plan.summary().c_str(),
                double(budget) / 1048576.0);
    std::printf("%-13s %10s %10s %9s %15s %9s %9s %9s %9s\n", "row", "act MiB", "median ms", "measured",
                "spread (min-max)", "FLOP", "calibr.", "FLOP pts", "cal. pts");
  }
  for (const Row& r : rows) {
    const double meas = median(r.ratio);
    const double lo = *std::min_element(r.ratio.begin(), r.ratio.end()),
                 hi = *std::max_element(r.ratio.begin(), r.ratio.end());
    const double fl = flops(r) / none_flops, ca = predicted(r) / none_pred;
    const double act = double(peak(r.schedule, r.policy)) / 1048576.0;
    if (f.json) {
      out.push_back({{"row", r.label},
                     {"predicted_activation_bytes", peak(r.schedule, r.policy)},
                     {"step_ms_median", median(r.step_ms)},
                     {"overhead_measured", meas},
                     {"overhead_measured_min", lo},
                     {"overhead_measured_max", hi},
                     {"overhead_flops", fl},
                     {"overhead_calibrated", ca},
                     {"flops_minus_measured_points", (fl - meas) * 100},
                     {"calibrated_minus_measured_points", (ca - meas) * 100},
                     {"config", cfg.describe()},
                     {"batch", B},
                     {"seq", T},
                     {"threads", threads},
                     {"calibration", source},
                     {"clock", f.clock},
                     {"load_average", {load0, load1}}});
    } else {
      std::printf("%-13s %10.2f %10.1f %9.3f %7.3f-%-7.3f %9.3f %9.3f %+9.1f %+9.1f\n", r.label.c_str(), act,
                  median(r.step_ms), meas, lo, hi, fl, ca, (fl - meas) * 100, (ca - meas) * 100);
    }
  }
  if (f.json) std::printf("%s\n", out.dump(2).c_str());
}
}  // namespace

void add_bench(CLI::App& root) {
  auto flags = std::make_shared<BenchFlags>();
  CLI::App* app = root.add_subcommand("bench", "Time training steps under several strategies in one run");
  BenchFlags& f = *flags;
  f.model.add_to(*app, kDefaultPreset);
  app->add_option("--recompute", f.strategies, "Rows to run, space separated: a strategy (none all block sqrt "
                                               "uniform:K segments:a,b,...), optionally with +POLICY (a preset of "
                                               "the model: selective, gelu, swiglu, norms) and flash+ / naive+ (e.g. "
                                               "selective flash+block)")
      ->capture_default_str();
  app->add_flag("--recompute-last", f.recompute_last, "Also recompute the last segment (the textbook count)");
  app->add_option("--segment-replay", f.segment_replay, "How a checkpointed segment is replayed: boundaries (keep block inputs, then each block's internals just before its backward: least memory) or internals (keep every block's internals in the one replay: least compute)")
      ->check(CLI::IsMember({"boundaries", "internals"}))->capture_default_str();
  app->add_option("--batch", f.batch, "B: sequences per optimizer step, as in remat train")->capture_default_str();
  app->add_option("--micro-batch", f.micro_batch, "b: sequences per forward (default: b = B)");
  app->add_option("--steps", f.steps, "Timed steps per row, at least 1 (the median is reported)")->capture_default_str();
  app->add_option("--warmup", f.warmup, "Untimed steps before the timed ones, per row (not remat train's learning-rate "
                                        "warmup)")->capture_default_str();
  add_seed_option(*app, f.seed, "Seed for init, batches and dropout (0 to 2^63-1)");
  app->add_option("--data", f.data, "Token data (default: uniform random tokens of --vocab)");
  app->add_flag("--json", f.json, "Print a JSON list of rows instead of the table");
  app->add_flag("--time-model", f.time_model, "Instead of the rows: the step-time overhead against none of block, sqrt, "
                                              "selective and the DP's plan at the memory midway between block and none, "
                                              "measured (rows interleaved, a second none row for the spread), predicted "
                                              "from FLOPs and from a calibration, with the differences in points");
  app->add_option("--calibration", f.calibration, "With --time-model: the calibration file to predict from (remat "
                                                  "calibrate --out; it must match this run), instead of calibrating "
                                                  "in this run");
  app->add_option("--clock", f.clock, "With --time-model: what to time, wall (seconds as they pass) or cpu (the "
                                      "process's CPU time, every thread's: steadier on a loaded machine)")
      ->check(CLI::IsMember({"wall", "cpu"}))->capture_default_str();
  app->add_flag("--profile", f.profile, "Also time every op (forward, recompute, backward; medians over the timed steps) and print where each "
                                        "strategy's step goes (JSON: a \"profile\" list per row)");
  app->callback([flags]() {
    BenchFlags& f = *flags;
    f.model.apply_threads();
    if (f.steps < 1)
      throw Error("bench", "--steps must be at least 1, got " + std::to_string(f.steps), "e.g. --steps 5");
    if (f.warmup < 0)
      throw Error("bench", "--warmup must be >= 0, got " + std::to_string(f.warmup), "e.g. --warmup 2 (0: none)");
    if (f.steps > 1000000 || f.warmup > 1000000)
      throw Error("bench", "--steps " + std::to_string(f.steps) + " --warmup " + std::to_string(f.warmup) +
                               ": more than a million steps per row", "e.g. --steps 5 --warmup 2");
    ModelConfig cfg = f.model.config();
    const int64_t T = f.model.seq(cfg);
    const int64_t micro = f.micro_batch ? f.micro_batch : f.batch;
    check_sizes(cfg, micro, T, 16.0);
    if (!f.calibration.empty() && !f.time_model)
      throw Error("bench", "--calibration is read only by --time-model", "add --time-model, or drop --calibration");
    if (f.clock != "wall" && !f.time_model)
      throw Error("bench", "--clock is read only by --time-model", "add --time-model, or drop --clock");
    if (f.time_model) {
      if (micro != f.batch)
        throw Error("bench", "--time-model times steps of one micro-batch, got --micro-batch " + std::to_string(micro) +
                                 " of --batch " + std::to_string(f.batch),
                    "drop --micro-batch");
      if (f.profile) throw Error("bench", "--time-model does not profile ops", "drop --profile");
      run_time_model(f, cfg, T);
      return;
    }
    std::vector<RowSpec> specs;
    const auto dry = planner::shape_only_model(cfg);
    for (auto& s : f.strategies) {  // fail before running anything
      specs.push_back(parse_row(s, *dry));
      parse_strategy(specs.back().strategy, int(cfg.L), f.recompute_last);
      dry->policy(specs.back().policy);
    }
    const double gemm_peak = measure_gemm_peak();
    // Each row is printed (and flushed) as soon as it is measured: the table line by line, the JSON
    // list row by row (valid JSON once the closing bracket is out).
    if (!f.json) {
      std::printf("remat bench: %s, B=%lld (micro %lld), T=%lld, %d threads, dropout %.2f, attention %s; "
                  "median of %lld steps after %lld warm-up; fp32 sgemm measured %.0f GFLOP/s\n",
                  cfg.describe().c_str(), (long long)f.batch, (long long)micro, (long long)T, omp_get_max_threads(),
                  cfg.dropout, autograd::attention_kind_name(cfg.attention), (long long)f.steps, (long long)f.warmup,
                  gemm_peak);
      std::printf("%-18s %5s %12s %12s %8s %10s %9s %9s %9s %9s %8s %7s\n", "strategy", "segs", "act MiB meas",
                  "act MiB pred", "fwd-eq", "median ms", "tok/s", "ovh time", "ovh FLOP", "ovh t-cal", "GFLOP/s",
                  "%sgemm");
    } else {
      std::printf("[");
    }
    std::fflush(stdout);
    nlohmann::json rows = nlohmann::json::array();
    double none_ms = 0, none_block_fwd_ms = 0;
    for (const RowSpec& row : specs) {
      const std::string& sname = row.label;
      TrainOptions o;
      o.model = cfg;
      if (row.attention) o.model.attention = *row.attention;
      o.policy = row.policy;
      o.seq = T;
      o.batch = f.batch;
      o.micro_batch = f.micro_batch;
      o.steps = f.warmup + f.steps;
      o.seed = f.seed;
      o.data = f.data;
      if (f.data.empty()) o.random_tokens = std::max<int64_t>(1 << 20, 40 * f.batch * (T + 1));
      o.recompute = row.strategy;
      o.recompute_last = f.recompute_last;
      o.replay_internals = f.segment_replay == "internals";
      o.eval_every = 0;
      o.sample_tokens = 0;
      o.progress = false;
      o.quiet = true;
      autograd::OpProfile prof;
      if (f.profile) o.profile = &prof;
      Trainer t(o);
      prof.local = [&m = t.model()](const std::string& n) {  // every block's op under one name
        auto s = m.split_name(n);
        return s ? s->second : n;
      };
      std::vector<double> ms, chain_fwd_ms;
      std::vector<autograd::OpProfile> step_profiles;
      StepMeasure last;
      for (int64_t st = 0; st < f.warmup + f.steps; ++st) {
        StepMeasure m;
        prof.ops.clear();
        const double t0 = now();
        t.step(st, &m);
        const double dt = (now() - t0) * 1e3;
        if (st >= f.warmup) {
          if (f.profile) step_profiles.push_back(prof);
          ms.push_back(dt);
          chain_fwd_ms.push_back(m.chain_forward_s * 1e3);
        }
        last = m;
      }
      std::sort(ms.begin(), ms.end());
      const double med = ms.size() % 2 ? ms[ms.size() / 2] : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
      ReportInput ri{&t.model(), micro, T, f.batch / micro, t.strategy(), last,
                     t.policy().keeps_all() ? nullptr : &t.policy(), t.policy().label()};
      nlohmann::json j = report_json(ri);
      j["strategy"] = sname;
      const auto& c = last.counters;
      const double step_flops = c.fwd_flops + c.bwd_flops + c.recompute_flops;
      std::sort(chain_fwd_ms.begin(), chain_fwd_ms.end());
      if (sname == "none") {
        none_ms = med;
        // One block forward, in time, measured on `none`'s first pass.
        none_block_fwd_ms = chain_fwd_ms[chain_fwd_ms.size() / 2] / double(c.block_forwards);
      }
      // Time-calibrated prediction: none's step plus the recomputed block forwards at none's
      // measured per-block forward time. The FLOP prediction assumes every FLOP costs the same
      // time; backward FLOPs run slower than forward ones here, so it overstates the overhead.
      if (none_ms > 0)
        j["overhead_predicted_time"] = (none_ms + double(c.block_recomputes) * none_block_fwd_ms) / none_ms;
      else
        j["overhead_predicted_time"] = nullptr;
      j["step_ms_median"] = med;
      j["step_ms_min"] = ms.front();
      j["step_ms_max"] = ms.back();
      j["tokens_per_s"] = double(f.batch * T) / (med / 1e3);
      if (none_ms > 0) j["overhead_measured"] = med / none_ms;
      else j["overhead_measured"] = nullptr;
      j["gflops"] = step_flops / (med / 1e3) / 1e9;
      j["share_of_gemm_peak"] = step_flops / (med / 1e3) / 1e9 / gemm_peak;
      j["gemm_peak_gflops"] = gemm_peak;
      j["config"] = cfg.describe();
      j["batch"] = f.batch;
      j["micro_batch"] = micro;
      j["seq"] = T;
      j["threads"] = omp_get_max_threads();
      if (f.profile) j["profile"] = profile_json(step_profiles);
      rows.push_back(j);
      if (f.json) {
        // The row as dump(2) would print it inside the list: indented by two more spaces.
        std::string text = j.dump(2), indented = "  ";
        for (char ch : text) {
          indented += ch;
          if (ch == '\n') indented += "  ";
        }
        std::printf("%s\n%s", rows.size() == 1 ? "" : ",", indented.c_str());
        std::fflush(stdout);
      } else {
        char ovh[16] = "-", cal[16] = "-";
        if (none_ms > 0) std::snprintf(ovh, sizeof ovh, "%.3f", med / none_ms);
        if (none_ms > 0) std::snprintf(cal, sizeof cal, "%.3f", j["overhead_predicted_time"].get<double>());
        std::printf("%-18s %5zu %12.2f %12.2f %8.2f %10.1f %9.0f %9s %9.3f %9s %8.1f %6.1f%%\n", sname.c_str(),
                    t.strategy().segments.size(), double(last.peak_activation) / 1048576.0,
                    double(j["predicted_activation_bytes"].get<size_t>()) / 1048576.0,
                    j["forward_equivalents"].get<double>(), med, j["tokens_per_s"].get<double>(), ovh,
                    j["overhead_predicted"].get<double>(), cal, j["gflops"].get<double>(),
                    100.0 * j["share_of_gemm_peak"].get<double>());
        if (f.profile) print_profile(j["profile"], med);
        std::fflush(stdout);
      }
    }
    if (f.json) std::printf("\n]\n");
  });
}

}  // namespace remat::cli
