// remat bench: one run over checkpoint strategies (and a plan file's plan) for one config. Medians
// over timed steps after a warm-up, measured activation peaks beside the planner's, and overheads
// against `none`, measured and predicted by the planner (FLOPs; with --calibration, this machine's
// time). With --time-model: measured, FLOP-predicted and calibrated overheads, for one or several
// configs in one run. This file holds the flags, checked before any work; bench.h lists the rest.
#include <omp.h>

#include <algorithm>
#include <cctype>
#include <optional>
#include <sstream>
#include <vector>

#include "core/process_memory.h"
#include "cli/bench.h"
#include "core/error.h"
#include "core/threads.h"
#include "core/io_policy.h"
#include "planner/calibration.h"

namespace remat::cli {

namespace {
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
// What --time-model runs when no model flag, --batch, --configs or --plan is given: the time table's
// two configs at a batch and sequence length that take a few minutes on two cores.
constexpr const char* kDefaultConfigs = "L16 C256 NH4 T256 B8; L12 C768 NH12 T256 B2";

std::string config_keys_help() {
  std::string s;
  for (const ConfigKey& k : kConfigKeys) s += std::string(s.empty() ? "" : ", ") + k.key + " " + (k.flag + 2);
  return s;
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

}  // namespace

void add_bench(CLI::App& root) {
  auto flags = std::make_shared<BenchFlags>();
  CLI::App* app = root.add_subcommand("bench", "Time training steps under several strategies in one run");
  BenchFlags& f = *flags;
  f.model.add_to(*app, kDefaultPreset);
  f.model.add_shape_from(*app);
  add_shared(*app, "--recompute", f.strategies,
             "the rows to run, space separated, each optionally with +POLICY (a preset of the model: selective, "
             "gelu, swiglu, norms) and flash+ / naive+ (e.g. selective flash+block)");
  add_shared_switch(*app, "--recompute-last", f.recompute_last);
  add_shared(*app, "--segment-replay", f.segment_replay)->check(CLI::IsMember({"boundaries", "internals"}));
  add_shared(*app, "--batch", f.batch);
  add_shared(*app, "--micro-batch", f.micro_batch);
  app->add_option("--timed-steps", f.steps, "Timed steps per row, at least 1 (the median is reported)")->capture_default_str();
  app->add_option("--untimed-steps", f.warmup, "Untimed steps before the timed ones, per row")->capture_default_str();
  add_seed_option(*app, f.seed);
  add_shared(*app, "--data", f.data, "the batches (default: uniform random tokens of --vocab)");
  add_shared_switch(*app, "--json", f.json, "a list of rows");
  app->add_flag("--time-model", f.time_model, "Instead of the rows: the step-time overhead against none of block, sqrt, "
                                              "selective and the DP's plan at the memory midway between block and none, "
                                              "measured (rows interleaved, a second none row for the spread), predicted "
                                              "from FLOPs and from a calibration, with the differences in points");
  add_shared(*app, "--calibration", f.calibration,
             "with --time-model, one per config in the order of --configs, instead of calibrating each config in "
             "this run; without, one, and the rows show its predicted overhead (column \"ovh cal\") beside the FLOP "
             "count's");
  app->add_option("--configs", f.configs,
                  std::string("With --time-model: several models in one run and one table, separated by ';', each as "
                              "KEY then value: ") + config_keys_help() + " (e.g. '" + kDefaultConfigs +
                      "'); the other model flags apply to every config. Default, when none of --preset, --arch, "
                      "--block-size, --plan and the flags the keys set is given: '" + kDefaultConfigs + "'");
  add_shared(*app, "--plan", f.plan,
             "also bench it, a row \"plan\" beside the --recompute rows (default with --plan: none), or beside "
             "--time-model's");
  add_shared(*app, "--clock", f.clock, "with --time-model")->check(CLI::IsMember({"wall", "cpu"}));
  app->add_flag("--profile", f.profile, "Also time every op (forward, recompute, backward; medians over the timed steps) and print where each "
                                        "strategy's step goes (JSON: a \"profile\" list per row)");
  app->callback([flags, app]() {
    BenchFlags& f = *flags;
    auto given = [&](const char* name) { return app->get_option(name)->count() > 0; };
    f.model.apply_threads();
    // A calibration (given, or made by --time-model) is of one thread count: its rows run at that count.
    if (f.calibration.empty() && !f.time_model) threads::enable_unless_fixed(given("--threads"), stderr);
    if (f.steps < 1)
      throw Error("bench", "--timed-steps must be at least 1, got " + std::to_string(f.steps), "e.g. --timed-steps 5");
    if (f.warmup < 0)
      throw Error("bench", "--untimed-steps must be >= 0, got " + std::to_string(f.warmup),
                  "e.g. --untimed-steps 2 (0: none)");
    if (f.steps > 1000000 || f.warmup > 1000000)
      throw Error("bench", "--timed-steps " + std::to_string(f.steps) + " --untimed-steps " + std::to_string(f.warmup) +
                               ": more than a million steps per row", "e.g. --timed-steps 5 --untimed-steps 2");
    if (f.calibration.size() > 1 && !f.time_model)
      throw Error("bench", std::to_string(f.calibration.size()) + " calibration files for one model",
                  "give one --calibration file, or several models with --time-model --configs");
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
    std::optional<planner::Calibration> cal;  // checked for this model, micro-batch, seq and threads
    if (!f.calibration.empty()) cal = calibration_for(f.calibration[0], cfg, micro, T);
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
    run_rows(f, cfg, T, specs, cal, f.calibration.empty() ? "" : f.calibration[0]);
    if (!f.json) std::printf("%s\n", command_process_line().c_str());
  });
}

}  // namespace remat::cli
