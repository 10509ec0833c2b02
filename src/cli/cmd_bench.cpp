// remat bench: one run over checkpoint strategies (and a plan file's plan) for one config. Medians
// over timed steps after a warm-up, measured activation peaks beside the planner's, and overheads
// against `none`. With --time-model: measured, FLOP-predicted and calibrated overheads, for one or
// several configs in one run.
#include <omp.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <vector>

#include "cli/flags.h"
#include "core/error.h"
#include "core/io_policy.h"
#include "core/stats.h"
#include "kernels/bf16.h"
#include "kernels/dot_bf16.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"
#include "planner/calibration.h"
#include "planner/optimal.h"
#include "planner/planner.h"
#include "planner/budget.h"
#include "planner/calibrate.h"
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
  std::string configs;                   // --configs, for --time-model
  std::vector<std::string> calibration;  // one per config, in order
  std::string clock = "wall";
  std::string plan;  // a plan file (remat plan ... --out FILE)
};

// A bench row: "[flash+|naive+]STRATEGY[+POLICY]", e.g. "selective", "flash+block", "block+gelu".
struct RowSpec {
  std::string label, strategy = "none", policy = "none";
  std::optional<autograd::AttentionKind> attention;
  const StepPlan* plan = nullptr;  // the row runs this plan (label, strategy and policy unused)
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

// The GEMM rate of this machine at a GPT-sized shape, measured now (GFLOP/s), in the run's precision:
// fp32 sgemm, or oneDNN's bf16 matmul (bf16 in and out, fp32 accumulation) as the bf16 layers run it.
double measure_gemm_peak(DType precision) {
  const int64_t M = 2048, K = 768, N = 3072;
  Tensor a = Tensor::zeros({M, K}, Category::Workspace, "bench.gemm.a", precision);
  Tensor b = Tensor::zeros({K, N}, Category::Workspace, "bench.gemm.b", precision);
  Tensor c = Tensor::zeros({M, N}, Category::Workspace, "bench.gemm.c", precision);
  a.fill(0.5f);
  b.fill(0.25f);
  std::vector<double> t;
  for (int r = 0; r < 12; ++r) {
    double t0 = now();
    if (precision == DType::BF16)
      kernels::gemm_bf16(false, false, M, N, K, a.data_bf16(), K, b.data_bf16(), N, 0.0f, c.data_bf16(), N);
    else
      kernels::sgemm(false, false, M, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f, c.data(), N);
    t.push_back(now() - t0);
  }
  std::sort(t.begin(), t.end());
  return 2.0 * M * N * K / t[t.size() / 2] / 1e9;
}

// Which bf16 code ran (issue #10: a CPU without AVX512_BF16 runs a slower path, and says so): oneDNN's
// implementation of the layers' matmul, the conversions' path and the attention products' path.
nlohmann::json bf16_paths() {
  return {{"matmul", kernels::gemm_bf16_impl(false, false, 2048, 3072, 768, true)},
          {"conversions", kernels::bf16_isa_name(kernels::bf16_isa())},
          {"attention", kernels::dot_bf16_rows_path()}};
}

// The machine's load, as /proc/loadavg's first figure (the 1-minute average), or -1.
double load_average() {
  std::ifstream f("/proc/loadavg");
  double l = -1;
  f >> l;
  return f ? l : -1.0;
}

// --configs: several models for --time-model in one run, in the labels the measurements use
// ("L16 C256 NH4 T256 B8"). Each key sets one model flag (or the batch) for its config; the other
// model flags apply to every config.
struct ConfigKey {
  const char* key;
  const char* flag;
  int64_t ModelFlags::*field;  // null: the batch
};
constexpr ConfigKey kConfigKeys[] = {{"L", "--layers", &ModelFlags::L},   {"C", "--channels", &ModelFlags::C},
                                     {"NH", "--heads", &ModelFlags::NH},  {"KVH", "--kv-heads", &ModelFlags::KVH},
                                     {"H", "--hidden", &ModelFlags::hidden}, {"T", "--seq", &ModelFlags::T},
                                     {"V", "--vocab", &ModelFlags::V},    {"B", "--batch", nullptr}};
// What --time-model runs when no model flag, --batch, --configs or --plan is given: the two
// configs at a batch and sequence length that take a few minutes on two cores.
constexpr const char* kDefaultConfigs = "L16 C256 NH4 T256 B8; L12 C768 NH12 T256 B2";

std::string config_keys_help() {
  std::string s;
  for (const ConfigKey& k : kConfigKeys) s += std::string(s.empty() ? "" : ", ") + k.key + " " + (k.flag + 2);
  return s;
}

// One model of a --time-model run.
struct TimeConfig {
  std::string label;  // "L16 C256 NH4 T256 B8"
  ModelConfig cfg;
  int64_t B = 0, T = 0;
  std::string calibration;  // the file to predict from, or "" to calibrate in the run
  std::optional<planner::Calibration> cal;  // its contents, checked for this config before any work
};

// The policies --time-model prices: the DP's candidates first, then a plan file's other policies
// (priced, not planned with).
const std::vector<std::string> kTimeModelDpPolicies{"none", "selective"};
std::vector<std::string> time_model_policies(const StepPlan* file_plan) {
  std::vector<std::string> names = kTimeModelDpPolicies;
  if (file_plan)
    for (const std::string& n : file_plan->block_policy)
      if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  return names;
}

// Parses --configs into one TimeConfig per ';'-separated config, each built from `base` (the model
// flags as given) with its keys set, and checked as the model flags are (ModelFlags::config). Throws
// remat::Error naming the config and the token, with the spelling, on anything malformed.
std::vector<TimeConfig> parse_configs(const std::string& text, const ModelFlags& base, bool batch_given, int64_t batch) {
  const std::string hint = std::string("write e.g. --configs '") + kDefaultConfigs + "': configs separated by ';', "
                           "each KEY then a positive whole number, KEY one of " + config_keys_help();
  std::vector<TimeConfig> out;
  std::vector<std::string> parts;
  {
    std::string part;
    std::stringstream ss(text);
    while (std::getline(ss, part, ';')) parts.push_back(part);
    if (text.empty() || text.back() == ';') parts.push_back("");
  }
  for (size_t n = 0; n < parts.size(); ++n) {
    const std::string where = "config " + std::to_string(n + 1) + " of --configs " + quote_name(text);
    std::stringstream ss(parts[n]);
    std::vector<std::string> tokens;
    for (std::string tok; ss >> tok;) tokens.push_back(tok);
    if (tokens.empty()) throw Error("bench", where + " is empty", hint);
    ModelFlags mf = base;
    int64_t B = batch;
    std::vector<std::string> seen;
    for (const std::string& tok : tokens) {
      size_t digits = 0;
      while (digits < tok.size() && std::isalpha(static_cast<unsigned char>(tok[digits]))) ++digits;
      std::string key = tok.substr(0, digits);
      for (char& ch : key) ch = char(std::toupper(static_cast<unsigned char>(ch)));
      const ConfigKey* k = nullptr;
      for (const ConfigKey& c : kConfigKeys)
        if (key == c.key) k = &c;
      if (!k)
        throw Error("bench", where + ": " + quote_name(tok) + " does not start with a key", hint);
      const std::string num = tok.substr(digits);
      int64_t v = 0;
      bool ok = !num.empty() && num.size() <= 12;
      for (char ch : num) ok = ok && std::isdigit(static_cast<unsigned char>(ch));
      if (ok) v = std::stoll(num);
      if (!ok || v <= 0)
        throw Error("bench", where + ": " + quote_name(tok) + " needs a positive whole number after " + k->key, hint);
      if (std::find(seen.begin(), seen.end(), key) != seen.end())
        throw Error("bench", where + " gives " + key + " twice", hint);
      seen.push_back(key);
      if (k->field ? base.given(k->flag) : batch_given)
        throw Error("bench", where + " sets " + key + " and " + k->flag + " is given too",
                    std::string("drop ") + k->flag + " (it would apply to every config), or " + key + " from --configs");
      if (k->field)
        mf.*(k->field) = v;
      else
        B = v;
    }
    TimeConfig c;
    for (const std::string& tok : tokens) c.label += (c.label.empty() ? "" : " ") + tok;
    try {
      c.cfg = mf.config();
    } catch (const Error& e) {  // "[config] what (hint: ...)": the same, naming the config
      const std::string m = e.what();
      const size_t at = m.rfind("] ", m.find(' '));
      throw Error("bench", where + ": " + (at == std::string::npos ? m : m.substr(at + 2)));
    }
    c.T = mf.seq(c.cfg);
    c.B = B;
    out.push_back(c);
  }
  return out;
}

// `remat bench` and every option given on the command line, with `extra` appended: the command that
// reproduces this run.
std::string command_of(const CLI::App& app, const std::string& extra) {
  std::string s = "remat " + app.get_name();
  for (const CLI::Option* o : app.get_options()) {
    if (o->count() == 0) continue;
    s += " " + o->get_name();
    if (o->get_expected_max() != 0)  // not a flag
      for (const std::string& r : o->results()) s += " " + shell_quoted(r);
  }
  return s + extra;
}

std::string ratio_text(double r) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f", r);
  return b;
}

// One config's rows of --time-model, measured and predicted.
struct TimeRow {
  std::string label;
  size_t act_bytes = 0;
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

// remat bench --time-model, one config: the step-time overhead against store-everything of block,
// sqrt, selective, the DP's plan at the memory midway between block and none (and a plan file's plan,
// when given), measured, predicted from FLOPs and predicted from the calibration. The rows share one
// model and run interleaved, one step of each per round (the first row rotating), so that the
// machine's drift reaches them alike; a second `none` row measures the run-to-run spread of one
// strategy. Measured overheads are medians over rounds of the row's step over none's step in the same
// round.
TimeResult time_config(const BenchFlags& f, const TimeConfig& tc, const StepPlan* file_plan) {
  TimeResult res;
  res.c = tc;
  const ModelConfig& cfg = tc.cfg;
  const int L = int(cfg.L);
  const int64_t B = tc.B, T = tc.T;
  res.load0 = load_average();
  const std::vector<std::string>& dp_names = kTimeModelDpPolicies;
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

  // The plan problem: one dry run per candidate policy; the DP's time is the calibrated one.
  const auto dry = planner::shape_only_model(cfg);
  std::vector<NamePolicy> policies;
  std::vector<planner::StepTrace> traces;
  for (const std::string& n : names) {
    policies.push_back(dry->policy(n));
    traces.push_back(planner::trace_step(*dry, B, T, policies.back().keeps_all() ? nullptr : &policies.back()));
  }
  planner::PlanProblem pp;
  pp.traces.assign(traces.begin(), traces.begin() + std::ptrdiff_t(dp_names.size()));
  pp.policy_names = dp_names;
  pp.time = planner::calibrated_time(cal, dp_names);
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
    return planner::simulate_memory(planner::splice(traces, pol), s).peak_activation;
  };
  res.budget = (peak(rows[0].schedule, all_none) + peak(rows[1].schedule, all_none)) / 2;
  const planner::ChainPlan plan = planner::optimal_plan(pp, res.budget);
  res.budget_plan = plan.summary();
  rows.push_back({"budget plan", plan.schedule, plan.block_policy, {}, {}});
  if (file_plan) {
    std::vector<int> pol;
    for (const std::string& n : file_plan->block_policy)
      pol.push_back(int(std::find(names.begin(), names.end(), n) - names.begin()));
    rows.push_back({"plan", file_plan->schedule, pol, {}, {}});
  }
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
  res.load1 = load_average();

  auto flops = [&](const Row& r) {
    const planner::ComputePrediction c = planner::predict_compute(planner::splice(traces, r.policy), r.schedule);
    return c.fwd + c.bwd + c.recompute;
  };
  auto predicted = [&](const Row& r) {
    std::vector<int> ci;
    for (int p : r.policy) ci.push_back(cal_idx[size_t(p)]);
    return planner::predict_time(cal, r.schedule, ci).step;
  };
  const double none_flops = flops(rows[0]), none_pred = predicted(rows[0]);
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    TimeRow t;
    t.label = r.label;
    t.act_bytes = peak(r.schedule, r.policy);
    t.step_ms = median(r.step_ms);
    t.measured = median(r.ratio);
    t.lo = *std::min_element(r.ratio.begin(), r.ratio.end());
    t.hi = *std::max_element(r.ratio.begin(), r.ratio.end());
    t.flops = flops(r) / none_flops;
    t.calibrated = predicted(r) / none_pred;
    t.checked = i != 0 && i + 1 != rows.size();
    res.rows.push_back(t);
  }
  return res;
}

// remat bench --time-model over every config: one table, a row per (config, row), each config's rows
// printed as soon as they are measured; then the worst error of each prediction over the rows that
// predict something (all but none and none again), and each config's notes.
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
                         {"predicted_activation_bytes", r.act_bytes},
                         {"step_ms_median", r.step_ms},
                         {"overhead_measured", r.measured},
                         {"overhead_measured_min", r.lo},
                         {"overhead_measured_max", r.hi},
                         {"overhead_flops", r.flops},
                         {"overhead_calibrated", r.calibrated},
                         {"flops_minus_measured_points", fp},
                         {"calibrated_minus_measured_points", cp},
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
                    r.label.c_str(), double(r.act_bytes) / 1048576.0, r.step_ms, r.measured, r.lo, r.hi, r.flops,
                    r.calibrated, fp, cp);
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
  app->add_option("--calibration", f.calibration, "With --time-model: the calibration files to predict from, one per "
                                                  "config in the order of --configs (remat calibrate --out; each must "
                                                  "match its config), instead of calibrating each config in this run");
  app->add_option("--configs", f.configs,
                  std::string("With --time-model: several models in one run and one table, separated by ';', each as "
                              "KEY then value: ") + config_keys_help() + " (e.g. '" + kDefaultConfigs +
                      "'); the other model flags apply to every config. Default, when none of --preset, --arch, "
                      "--block-size, --plan and the flags the keys set is given: '" + kDefaultConfigs + "'");
  app->add_option("--plan", f.plan, "Also bench the plan in this file (remat plan ... --budget SIZE --out FILE), for "
                                    "the model, batch and seq it was made for: a row \"plan\" beside the --recompute "
                                    "rows (default with --plan: none), or beside --time-model's");
  app->add_option("--clock", f.clock, "With --time-model: what to time, wall (seconds as they pass) or cpu (the "
                                      "process's CPU time, every thread's: steadier on a loaded machine)")
      ->check(CLI::IsMember({"wall", "cpu"}))->capture_default_str();
  app->add_flag("--profile", f.profile, "Also time every op (forward, recompute, backward; medians over the timed steps) and print where each "
                                        "strategy's step goes (JSON: a \"profile\" list per row)");
  app->callback([flags, app]() {
    BenchFlags& f = *flags;
    auto given = [&](const char* name) { return app->get_option(name)->count() > 0; };
    f.model.apply_threads();
    if (f.steps < 1)
      throw Error("bench", "--steps must be at least 1, got " + std::to_string(f.steps), "e.g. --steps 5");
    if (f.warmup < 0)
      throw Error("bench", "--warmup must be >= 0, got " + std::to_string(f.warmup), "e.g. --warmup 2 (0: none)");
    if (f.steps > 1000000 || f.warmup > 1000000)
      throw Error("bench", "--steps " + std::to_string(f.steps) + " --warmup " + std::to_string(f.warmup) +
                               ": more than a million steps per row", "e.g. --steps 5 --warmup 2");
    if (!f.calibration.empty() && !f.time_model)
      throw Error("bench", "--calibration is read only by --time-model", "add --time-model, or drop --calibration");
    {  // bench writes no file; its inputs must not be FIFOs or devices (core/io_policy.h)
      IoPolicy io;
      io.input(f.data, "--data").input(f.plan, "--plan");
      for (const std::string& c : f.calibration) io.input(c, "--calibration");
      io.check();
    }
    if (f.clock != "wall" && !f.time_model)
      throw Error("bench", "--clock is read only by --time-model", "add --time-model, or drop --clock");
    if (given("--configs") && !f.time_model)
      throw Error("bench", "--configs is read only by --time-model", "add --time-model, or drop --configs");
    if (f.batch <= 0) throw Error("bench", "--batch must be positive, got " + std::to_string(f.batch), "e.g. --batch 8");
    // A plan file: checked against the model flags, batch and seq before any work.
    std::optional<StepPlan> plan;
    if (!f.plan.empty()) {
      for (const char* flag : {"--recompute-last", "--segment-replay", "--configs"})
        if (given(flag))
          throw Error("bench", std::string(flag) + " cannot be combined with --plan",
                      "the plan file gives its schedule and its model; drop " + std::string(flag));
      plan = read_plan_file(f.plan);
      const ModelConfig asked = f.model.config();
      check_plan_target(*plan, asked, f.model.given("--attention"), f.batch, f.micro_batch ? f.micro_batch : f.batch,
                        f.model.seq(asked), omp_get_max_threads(), f.plan);
      if (given("--time-model") && !plan->block_attention.empty())
        throw Error("bench", "'" + f.plan + "' runs a different attention kernel per block (" + attention_label(*plan) +
                                 "), and --time-model prices one kernel (a calibration covers one)",
                    "bench it without --time-model (remat bench --plan FILE), or plan with --attention naive or flash");
    }
    if (f.time_model) {
      if (f.profile) throw Error("bench", "--time-model does not profile ops", "drop --profile");
      // The configs: --configs, or the model flags as given, or (given nothing) the default pair.
      bool model_given = given("--batch") || plan.has_value();
      for (const ConfigKey& k : kConfigKeys)
        if (k.field) model_given = model_given || f.model.given(k.flag);
      for (const char* flag : {"--preset", "--arch", "--block-size"}) model_given = model_given || f.model.given(flag);
      const bool by_default = !given("--configs") && !model_given;
      std::vector<TimeConfig> configs;
      if (given("--configs") || by_default) {
        configs = parse_configs(by_default ? kDefaultConfigs : f.configs, f.model, given("--batch"), f.batch);
      } else {
        TimeConfig c;
        c.cfg = plan ? plan->cfg : f.model.config();  // the plan's attention kernel
        c.T = f.model.seq(c.cfg);
        c.B = f.batch;
        c.label = "L" + std::to_string(c.cfg.L) + " C" + std::to_string(c.cfg.C) + " NH" + std::to_string(c.cfg.NH) +
                  " T" + std::to_string(c.T) + " B" + std::to_string(c.B);
        configs.push_back(c);
      }
      if (!f.calibration.empty() && f.calibration.size() != configs.size())
        throw Error("bench", std::to_string(configs.size()) + " config" + (configs.size() == 1 ? "" : "s") + " but " +
                                 std::to_string(f.calibration.size()) + " calibration file" +
                                 (f.calibration.size() == 1 ? "" : "s"),
                    "give one --calibration file per config, in the order of --configs, or none to calibrate each "
                    "config in this run");
      for (size_t i = 0; i < configs.size(); ++i) {
        TimeConfig& c = configs[i];
        if (!f.calibration.empty()) {
          c.calibration = f.calibration[i];
          c.cal = planner::load_calibration(c.calibration);
          planner::check_calibration(*c.cal, c.cfg, c.B, c.T, omp_get_max_threads(), f.clock, c.calibration);
          planner::calibration_indices(*c.cal, time_model_policies(plan ? &*plan : nullptr));  // names a missing one
        }
        if (f.micro_batch && f.micro_batch != c.B)
          throw Error("bench", "--time-model times steps of one micro-batch, got --micro-batch " +
                                   std::to_string(f.micro_batch) + " of --batch " + std::to_string(c.B),
                      "drop --micro-batch");
        check_sizes(c.cfg, c.B, c.T, 16.0);
      }
      run_time_model(f, configs, plan ? &*plan : nullptr, f.plan,
                     command_of(*app, by_default ? " --configs " + shell_quoted(kDefaultConfigs) : ""));
      return;
    }
    ModelConfig cfg = plan ? plan->cfg : f.model.config();
    const int64_t T = f.model.seq(cfg);
    const int64_t micro = f.micro_batch ? f.micro_batch : f.batch;
    check_sizes(cfg, micro, T, 16.0);
    std::vector<RowSpec> specs;
    const auto dry = planner::shape_only_model(cfg);
    // With --plan and no --recompute, the plan runs beside none (for the overheads).
    const std::vector<std::string> row_texts =
        plan && !given("--recompute") ? std::vector<std::string>{"none"} : f.strategies;
    for (auto& s : row_texts) {  // fail before running anything
      specs.push_back(parse_row(s, *dry));
      parse_strategy(specs.back().strategy, int(cfg.L), f.recompute_last);
      dry->policy(specs.back().policy);
    }
    if (plan) {
      RowSpec r;
      r.label = "plan";
      r.plan = &*plan;
      specs.push_back(r);
    }
    const bool bf = cfg.precision == DType::BF16;
    const double gemm_peak = measure_gemm_peak(cfg.precision);
    const nlohmann::json paths = bf ? bf16_paths() : nlohmann::json();
    // Each row is printed (and flushed) as soon as it is measured: the table line by line, the JSON
    // list row by row (valid JSON once the closing bracket is out).
    if (!f.json) {
      std::printf("remat bench: %s, B=%lld (micro %lld), T=%lld, %d threads, dropout %.2f, attention %s; "
                  "median of %lld steps after %lld warm-up; %s measured %.0f GFLOP/s\n",
                  cfg.describe().c_str(), (long long)f.batch, (long long)micro, (long long)T, omp_get_max_threads(),
                  cfg.dropout, autograd::attention_kind_name(cfg.attention), (long long)f.steps, (long long)f.warmup,
                  bf ? "bf16 matmul (oneDNN)" : "fp32 sgemm", gemm_peak);
      if (bf)
        std::printf("bf16 paths: matmul %s, conversions %s, attention %s\n",
                    paths["matmul"].get<std::string>().c_str(), paths["conversions"].get<std::string>().c_str(),
                    paths["attention"].get<std::string>().c_str());
      if (plan)
        std::printf("plan %s: %s, attention %s (row \"plan\")\n", f.plan.c_str(), plan->summary.c_str(),
                    attention_label(*plan).c_str());
      std::printf("%-18s %5s %12s %12s %8s %10s %9s %9s %9s %9s %8s %7s\n", "strategy", "segs", "act MiB meas",
                  "act MiB pred", "fwd-eq", "median ms", "tok/s", "ovh time", "ovh FLOP", "ovh t-cal", "GFLOP/s",
                  bf ? "%mm" : "%sgemm");
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
      if (row.plan) apply_plan(*row.plan, o);
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
      TrainSummary ts;
      ts.measure = last;
      ReportInput ri = report_input(t, ts);  // the row's schedule, policies and kernels per block included
      nlohmann::json j = report_json(ri);
      j["strategy"] = sname;
      if (row.plan) j["plan_file"] = f.plan;
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
      j["gemm_peak_gflops"] = gemm_peak;  // in the run's precision
      j["precision"] = dtype_name(cfg.precision);
      if (bf) j["bf16_paths"] = paths;
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
