// remat bench: the rows (--recompute, a plan file's) as the planner's plans, and their run. Each row
// is a StepPlan from one set of candidates of the config (make_candidates: the kernels and presets
// the rows run), priced by the planner -- FLOPs, and with --calibration this machine's calibrated
// time -- and trained as that plan (apply_plan), so that what is predicted is what runs.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "cli/bench.h"
#include "core/error.h"
#include "core/stats.h"
#include "train/report.h"

namespace remat::cli {

namespace {
bool looks_like_strategy(const std::string& tok) {
  for (const char* s : {"none", "all", "block", "sqrt"})
    if (tok == s) return true;
  return tok.rfind("uniform:", 0) == 0 || tok.rfind("segments:", 0) == 0;
}
}  // namespace

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

StepPlan row_plan(const Candidates& c, const PlanTarget& t, const Schedule& s, const std::vector<std::string>& presets,
                  const std::vector<autograd::AttentionKind>& kernels) {
  const size_t L = size_t(c.cfg.L);
  auto each = [](const auto& v, size_t i) { return v.size() == 1 ? v[0] : v.at(i); };
  std::vector<int> index;
  std::vector<std::string> asked;
  for (size_t i = 0; i < L; ++i) {
    const std::string preset = each(presets, i);
    const autograd::AttentionKind k = each(kernels, i);
    int found = -1, none = -1;
    for (size_t p = 0; p < c.presets.size(); ++p) {
      if (c.kernels[p] != k) continue;
      if (c.presets[p] == preset) found = int(p);
      if (c.presets[p] == "none") none = int(p);
    }
    REMAT_ASSERT(none >= 0, "bench: a row runs an attention kernel its candidates lack");
    index.push_back(found >= 0 ? found : none);
    asked.push_back(preset);
  }
  StepPlan sp = unpriced_plan(c, chain_plan(c, s, index), t);
  sp.block_policy = asked;
  return sp;
}

namespace {

// The kernels the rows run, the config's first (make_candidates: one list, the DP's order).
std::vector<autograd::AttentionKind> row_kernels(const ModelConfig& cfg, const std::vector<RowSpec>& specs) {
  std::vector<autograd::AttentionKind> ks{cfg.attention};
  auto add = [&](autograd::AttentionKind k) {
    if (std::find(ks.begin(), ks.end(), k) == ks.end()) ks.push_back(k);
  };
  for (const RowSpec& r : specs) {
    if (r.plan) {
      add(r.plan->cfg.attention);
      for (autograd::AttentionKind k : r.plan->block_attention) add(k);
    } else if (r.attention) {
      add(*r.attention);
    }
  }
  return ks;
}

// What a row runs: its plan, and for a textbook row (a strategy and one policy) the strategy it is.
struct Row {
  const RowSpec* spec = nullptr;
  StepPlan plan;
  std::optional<StrategySpec> strategy;
};

// A ratio to three places, or "-" when there is none.
std::string ratio_or_dash(bool have, double r) {
  char b[32] = "-";
  if (have) std::snprintf(b, sizeof b, "%.3f", r);
  return b;
}

}  // namespace

void run_rows(const BenchFlags& f, const ModelConfig& cfg, int64_t T, const std::vector<RowSpec>& specs,
              const std::optional<planner::Calibration>& calibration, const std::string& calibration_file) {
  const int L = int(cfg.L);
  const int64_t micro = f.micro_batch ? f.micro_batch : f.batch;
  // The candidates: every kernel and preset a row runs, none of each kernel among them.
  const std::vector<autograd::AttentionKind> kernels = row_kernels(cfg, specs);
  if (calibration && kernels.size() > 1)
    throw Error("bench", "the rows run " + std::string(autograd::attention_kind_name(kernels[1])) + " attention beside " +
                             autograd::attention_kind_name(cfg.attention) + ", and the calibration '" + calibration_file +
                             "' prices one kernel, " + autograd::attention_kind_name(cfg.attention),
                "drop --calibration, or bench the other kernel's rows in a run of their own with a calibration of it");
  std::vector<std::string> presets;
  for (const RowSpec& r : specs)
    for (const std::string& p : r.plan ? r.plan->block_policy : std::vector<std::string>{r.policy})
      if (p != "none" && std::find(presets.begin(), presets.end(), p) == presets.end()) presets.push_back(p);
  if (presets.empty()) presets.push_back("none");  // no preset: "none" alone (an empty list means every preset)
  const Candidates c = make_candidates(cfg, micro, T, calibration ? &*calibration : nullptr,
                                       kernels.size() > 1 ? kernels : std::vector<autograd::AttentionKind>{}, presets);
  PlanTarget target;
  target.cfg = cfg;
  target.batch = f.batch;
  target.micro = micro;
  target.T = T;
  target.calibration = calibration;
  // The plans. Store-everything's, the baseline of the calibrated overhead, whether it runs or not.
  const StepPlan none =
      row_plan(c, target, make_schedule(parse_strategy("none", L, false), L), {"none"}, {cfg.attention});
  std::vector<Row> rows;
  for (const RowSpec& r : specs) {
    Row row{&r, {}, std::nullopt};
    if (r.plan) {
      row.plan = row_plan(c, target, r.plan->schedule, r.plan->block_policy,
                          r.plan->block_attention.empty() ? std::vector<autograd::AttentionKind>{r.plan->cfg.attention}
                                                          : r.plan->block_attention);
      row.plan.summary = r.plan->summary;
    } else {
      row.strategy = parse_strategy(r.strategy, L, f.recompute_last, f.segment_replay == "internals");
      row.plan = row_plan(c, target, make_schedule(*row.strategy, L), {r.policy}, {r.attention.value_or(cfg.attention)});
      row.plan.summary = r.label;
    }
    rows.push_back(std::move(row));
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
      std::printf("bf16 paths: matmul %s, conversions %s, attention %s\n", paths["matmul"].get<std::string>().c_str(),
                  paths["conversions"].get<std::string>().c_str(), paths["attention"].get<std::string>().c_str());
    for (const Row& r : rows)
      if (r.spec->plan)
        std::printf("plan %s: %s, attention %s (row \"plan\")\n", f.plan.c_str(), r.spec->plan->summary.c_str(),
                    attention_label(*r.spec->plan).c_str());
    if (calibration)
      std::printf("calibration %s: its predicted step time against none's (column \"ovh cal\")\n",
                  calibration_file.c_str());
    std::printf("%-18s %5s %12s %12s %8s %10s %9s %9s %9s%s %8s %7s\n", "strategy", "segs", "act MiB meas",
                "act MiB pred", "fwd-eq", "median ms", "tok/s", "ovh time", "ovh FLOP", calibration ? "   ovh cal" : "",
                "GFLOP/s", bf ? "%mm" : "%sgemm");  // "ovh cal" right-aligned as the other ratios
  } else {
    std::printf("[");
  }
  std::fflush(stdout);
  size_t printed = 0;
  double none_ms = 0;
  for (const Row& row : rows) {
    const RowSpec& spec = *row.spec;
    TrainOptions o;
    apply_plan(row.plan, o);  // model and kernel, batch, micro-batch, seq, schedule, policy per block
    if (row.strategy) {
      // A textbook row runs its one policy as the run's (train --policy), so that the report names it.
      o.policy = spec.policy;
      o.block_policy.clear();
    }
    o.steps = f.warmup + f.steps;
    o.seed = f.seed;
    o.data = f.data;
    if (f.data.empty()) o.random_tokens = std::max<int64_t>(1 << 20, 40 * f.batch * (T + 1));
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
    std::vector<double> ms;
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
      }
      last = m;
    }
    const double med = median(ms);
    const auto [lo, hi] = std::minmax_element(ms.begin(), ms.end());
    TrainSummary ts;
    ts.measure = last;
    ReportInput ri = report_input(t, ts);  // the row's schedule, policies and kernels per block included
    if (row.strategy) ri.strategy = *row.strategy;  // its name as asked (the trainer names a schedule it knows)
    nlohmann::json j = report_json(ri);
    j["strategy"] = spec.label;
    if (spec.plan) j["plan_file"] = f.plan;
    const auto& cnt = last.counters;
    const double step_flops = cnt.fwd_flops + cnt.bwd_flops + cnt.recompute_flops;
    if (spec.label == "none") none_ms = med;
    // The predictions are the planner's, of the plan that ran.
    j["overhead_predicted"] = row.plan.compute.overhead();
    if (calibration) {
      j["overhead_calibrated"] = *row.plan.seconds / *none.seconds;
      j["calibration"] = calibration_file;
    }
    j["step_ms_median"] = med;
    j["step_ms_min"] = *lo;
    j["step_ms_max"] = *hi;
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
    ++printed;
    if (f.json) {
      // The row as dump(2) would print it inside the list: indented by two more spaces.
      std::string text = j.dump(2), indented = "  ";
      for (char ch : text) {
        indented += ch;
        if (ch == '\n') indented += "  ";
      }
      std::printf("%s\n%s", printed == 1 ? "" : ",", indented.c_str());
    } else {
      char cal[32] = "";
      if (calibration) std::snprintf(cal, sizeof cal, " %9.3f", j["overhead_calibrated"].get<double>());
      std::printf("%-18s %5zu %12.2f %12.2f %8.2f %10.1f %9.0f %9s %9.3f%s %8.1f %6.1f%%\n", spec.label.c_str(),
                  (row.strategy ? *row.strategy : t.strategy()).segments.size(), double(last.peak_activation) / 1048576.0,
                  double(j["predicted_activation_bytes"].get<size_t>()) / 1048576.0,
                  j["forward_equivalents"].get<double>(), med, j["tokens_per_s"].get<double>(),
                  ratio_or_dash(none_ms > 0, med / none_ms).c_str(), row.plan.compute.overhead(),
                  cal, j["gflops"].get<double>(),
                  100.0 * j["share_of_gemm_peak"].get<double>());
      if (f.profile) print_profile(j["profile"], med);
    }
    std::fflush(stdout);
  }
  if (f.json) std::printf("\n]\n");
}

}  // namespace remat::cli
