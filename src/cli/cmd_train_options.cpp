// remat train's options from elsewhere than its flags (cmd_train.h): a checkpoint (--resume) or a
// plan (--budget, --plan).
#include <omp.h>

#include <cstdio>
#include <filesystem>
#include <sstream>

#include "cli/cmd_train.h"
#include "core/error.h"
#include "core/process_memory.h"
#include "dist/data_parallel.h"
#include "dist/comm.h"
#include "tokenizer/tokenizer.h"
#include "planner/budget.h"
#include "train/run_data.h"
#include "train/run_state.h"

namespace remat::cli {

namespace fs = std::filesystem;

// --resume: the run comes from the checkpoint. A flag given on the command line must agree with it,
// or the resume is refused in one line naming every flag that differs; the exceptions are the
// strategy and policy flags (they change memory and time, not one bit of the results), --steps
// (raised, as long as the learning-rate schedule stays what it was: --lr-decay-steps says how) and
// the checkpointing flags. A field a version 1 checkpoint did not record (its precision) is the
// command line's.
void merge_resume(CLI::App& app, const ModelFlags& mf, TrainOptions& o) {
  if (!o.init_from.empty())
    throw Error("train", "--resume and --init-from cannot be combined",
                "--resume continues a run with its weights and optimizer state; --init-from starts a new one");
  const std::string dir = find_checkpoint(o.resume);
  const RunState st = read_run_state(dir);
  TrainOptions ck = o;
  static_cast<RunConfig&>(ck) = st.options;
  auto given = [&](const char* name) {
    const CLI::Option* op = app.get_option_no_throw(name);
    return op && op->count() > 0;
  };
  const ModelConfig asked = mf.config();
  for (const std::string& f : st.unrecorded) {
    if (f == "model.precision") ck.model.precision = asked.precision;
    if (f == "model.fp32_residual") ck.model.fp32_residual = asked.fp32_residual;
    std::printf("note: the checkpoint '%s' (version %d) does not record %s; this run's is used\n", dir.c_str(),
                st.version, f.c_str());
  }
  const ModelConfig& have = ck.model;
  std::string diff;
  auto differs = [&](const std::string& flag, const std::string& value, const std::string& saved) {
    diff += (diff.empty() ? "" : ", ") + flag + " " + value + " (the checkpoint has " + saved + ")";
  };
  auto num = [](auto v) {
    std::ostringstream s;
    s << v;
    return s.str();
  };
  auto check = [&](const char* flag, auto a, auto b) {
    if (given(flag) && a != b) differs(flag, num(a), num(b));
  };
  if (given("--preset")) {  // the preset's own architecture; explicit flags are checked one by one below
    const ModelConfig p = preset(mf.preset);
    auto same_or_flag = [&](const char* flag, bool same) { return same || given(flag); };
    if (!same_or_flag("--arch", p.arch == have.arch) || !same_or_flag("--layers", p.L == have.L) ||
        !same_or_flag("--channels", p.C == have.C) || !same_or_flag("--heads", p.NH == have.NH) ||
        !same_or_flag("--kv-heads", p.kv_heads() == have.kv_heads()) || !same_or_flag("--vocab", p.V == have.V))
      differs("--preset", mf.preset, have.describe());
  }
  check("--arch", std::string(arch_name(asked.arch)), std::string(arch_name(have.arch)));
  check("--layers", asked.L, have.L);
  check("--channels", asked.C, have.C);
  check("--heads", asked.NH, have.NH);
  check("--kv-heads", asked.kv_heads(), have.kv_heads());
  check("--hidden", asked.mlp_hidden(), have.mlp_hidden());
  check("--rope-theta", asked.rope_theta, have.rope_theta);
  check("--vocab", asked.V, have.V);
  check("--block-size", asked.T, have.T);
  check("--seq", mf.seq(asked), ck.seq);
  check("--dropout", asked.dropout, have.dropout);
  check("--attention", std::string(autograd::attention_kind_name(asked.attention)),
        std::string(autograd::attention_kind_name(have.attention)));
  if (given("--precision") && asked.precision != have.precision)  // as the flag spells it: fp32 | bf16
    differs("--precision", mf.precision, have.precision == DType::BF16 ? "bf16" : "fp32");
  check("--fp32-residual", asked.fp32_residual, have.fp32_residual);
  check("--batch", o.batch, ck.batch);
  check("--micro-batch", o.micro_batch, ck.micro_batch);
  check("--lr", o.lr, ck.lr);
  check("--warmup", o.warmup, ck.warmup);
  check("--weight-decay", o.weight_decay, ck.weight_decay);
  check("--clip", o.clip, ck.clip);
  check("--seed", o.seed, ck.seed);
  check("--data-format", o.data_format, ck.data_format);
  check("--val-fraction", o.val_fraction, ck.val_fraction);
  if (given("--tokenizer") && !(tok::is_bytes(o.tokenizer) && tok::is_bytes(ck.tokenizer)) &&
      fs::weakly_canonical(fs::absolute(o.tokenizer)) != fs::path(ck.tokenizer))
    differs("--tokenizer", "'" + o.tokenizer + "'", ck.tokenizer.empty() ? "bytes" : "'" + ck.tokenizer + "'");
  // The data: a version 3 checkpoint records its content, which the trainer checks, so --data and
  // --val-data may name the same data where it is now (moved, copied). Older checkpoints recorded
  // only the path: the file must be that one.
  auto same_file = [](const std::string& a, const std::string& b) {
    std::error_code ec;
    return !b.empty() && fs::exists(a, ec) && fs::exists(b, ec) && fs::equivalent(a, b, ec);
  };
  const bool by_content = st.version >= 3;
  if (given("--val-data") && o.val_data != ck.val_data) {
    if (ck.val_data.empty() || (!by_content && !same_file(o.val_data, ck.val_data)))
      differs("--val-data", "'" + o.val_data + "'", ck.val_data.empty() ? "no --val-data" : "'" + ck.val_data + "'");
    else
      ck.val_data = o.val_data;
  }
  if (given("--data") && o.data != ck.data) {
    if (ck.data.empty() || (!by_content && !same_file(o.data, ck.data)))
      differs("--data", "'" + o.data + "'", ck.data.empty() ? "the built-in corpus" : "'" + ck.data + "'");
    else
      ck.data = o.data;
  }
  // The ranks: a continuation is bit-identical on the checkpoint's count (under mpirun, or emulated
  // by one process). Another count under mpirun must be asked for: the whole AdamW state is in the
  // checkpoint, so it reshards, but the gradient sums change order and the bits differ from there on.
  const int world = dist::Comm::world().size();
  if (given("--ranks"))
    ck.ranks = o.ranks;
  else if (world > 1 && world != ck.ranks)
    throw Error("train", "the checkpoint '" + dir + "' was trained on " + std::to_string(ck.ranks) + " rank(s), and mpirun started " +
                             std::to_string(world) + " processes",
                "resume under mpirun -np " + std::to_string(ck.ranks) + " (or without mpirun, which runs its " +
                    std::to_string(ck.ranks) + " ranks in one process) for a bit-identical continuation, or give --ranks " +
                    std::to_string(world) + " to reshard (the sums then change order)");
  if (given("--zero")) ck.zero = o.zero;  // where AdamW's state lives: no bit changes
  if (!diff.empty())
    throw Error("train", "the command line contradicts the checkpoint '" + dir + "': " + diff,
                "drop those flags to resume with the checkpoint's values, or start a new run without --resume");
  // Strategy and policy: the command line's when any is given (they are exact), else the checkpoint's,
  // a plan's schedule and policies per block included. A plan's kernels per block stay: they are bits.
  if (given("--recompute") || given("--policy") || given("--save-only") || given("--save-all-but") ||
      given("--recompute-last") || given("--segment-replay")) {
    ck.recompute = o.recompute;
    ck.policy = o.policy;
    ck.save_only = o.save_only;
    ck.save_all_but = o.save_all_but;
    ck.recompute_last = o.recompute_last;
    ck.replay_internals = o.replay_internals;
    ck.schedule.reset();
    ck.block_policy.clear();
  }
  // --steps may be raised; the learning-rate schedule stays the checkpoint's unless --lr-decay-steps
  // says otherwise.
  if (given("--lr-decay-steps")) ck.lr_decay_steps = o.lr_decay_steps;
  if (given("--steps")) {
    if (o.steps <= st.step)
      throw Error("train", "--steps " + std::to_string(o.steps) +
                               (o.steps < st.step ? " is below the checkpoint's step " : " is the checkpoint's step ") +
                               std::to_string(st.step) + " ('" + dir + "'): nothing to train",
                  "give --steps " + std::to_string(st.step + 1) + " or more to continue");
    RunConfig longer = ck;
    longer.steps = o.steps;
    int64_t at = st.step;  // the first step still to run whose rate the new length would change
    while (at < o.steps && longer.lr_at(at) == ck.lr_at(at)) ++at;
    if (!given("--lr-decay-steps") && at < o.steps) {
      char jump[160];
      std::snprintf(jump, sizeof jump, "the learning rate of step %lld would be %.4g instead of %.4g", (long long)at + 1,
                    longer.lr_at(at), ck.lr_at(at));
      throw Error("train",
                  "--steps " + std::to_string(o.steps) + " changes the learning-rate schedule of the checkpoint's run, "
                      "whose cosine decay spans its " + std::to_string(ck.steps) + " steps: " + jump,
                  "add --lr-decay-steps " + std::to_string(ck.decay_steps()) +
                      " to keep the schedule (the added steps train at the final rate), or --lr-decay-steps " +
                      std::to_string(o.steps) + " to stretch the decay over the new length from here on");
    }
    ck.steps = o.steps;
  } else if (ck.steps <= st.step) {
    throw Error("train", "the checkpoint '" + dir + "' is at step " + std::to_string(st.step) + " of " +
                             std::to_string(ck.steps) + ": the run is complete",
                "raise --steps above " + std::to_string(st.step) + " to train further");
  }
  // Checkpoints continue into the checkpoint's save dir, every --save-every (the run's unless given).
  if (given("--save-every")) ck.save_every = o.save_every;
  if (given("--keep")) ck.keep = o.keep;
  ck.save_dir = given("--save-dir") ? o.save_dir : fs::path(dir).lexically_normal().parent_path().string();
  if (ck.save_dir.empty()) ck.save_dir = ".";
  ck.resume = dir;
  o = ck;
  std::printf("resuming from %s (step %lld of %lld)\n", dir.c_str(), (long long)st.step, (long long)o.steps);
}

RankBudgetPlan plan_rank_budget(PlanTarget t, size_t budget, int ranks, int zero, int64_t rank_accum, bool overlap,
                                std::optional<bool> fixed_hold, const std::function<double(const StepPlan&, bool)>& cost) {
  RankBudgetPlan out;
  if (zero != 3 || fixed_hold) {
    out.hold = fixed_hold.value_or(true);
    t.rank = dist::rank_share_to_plan(ranks, zero, rank_accum, overlap, out.hold);
    out.plan = plan_for_budget(t, budget);
    return out;
  }
  auto cost_of = [&](const StepPlan& p, bool hold) { return cost ? cost(p, hold) : plan_cost(p); };
  std::optional<StepPlan> held, again;
  t.rank = dist::rank_share_to_plan(ranks, zero, rank_accum, overlap, true);
  try {
    held = plan_for_budget(t, budget);
    out.hold_cost = cost_of(*held, true);
  } catch (const Error& e) {
    if (std::string(e.what()).rfind("[budget]", 0) != 0) throw;
  }
  t.rank = dist::rank_share_to_plan(ranks, zero, rank_accum, overlap, false);
  try {
    again = plan_for_budget(t, budget);  // when neither fits, its refusal names the least step of both
    out.regather_cost = cost_of(*again, false);
  } catch (const Error&) {
    if (!held) throw;
  }
  out.hold = held && (!again || *out.hold_cost <= *out.regather_cost);
  out.plan = out.hold ? *held : *again;
  return out;
}

// --budget SIZE / --plan FILE: the strategy and policies come from a plan (planner/budget.h), made
// here for the whole step under the budget, or read from `remat plan --out`. Either excludes the
// flags that choose a strategy or a policy by hand.
void apply_budget_or_plan(CLI::App& app, const ModelFlags& mf, const std::string& budget_text, const std::string& plan_file,
                          TrainOptions& o) {
  auto given = [&](const char* name) {
    const CLI::Option* op = app.get_option_no_throw(name);
    return op && op->count() > 0;
  };
  const bool step_only = given("--step-budget");  // the step alone, not the process (budget_text is its value)
  const bool by_budget = given("--budget") || step_only, by_plan = given("--plan");
  if (given("--calibration") && !by_budget)
    throw Error("train", "--calibration is the time model --budget plans with", "add --budget SIZE, or drop --calibration");
  if (mf.attention_auto() && !by_budget)
    throw Error("train", "--attention auto lets the planner choose the kernel, and needs --budget",
                "add --budget SIZE, or choose --attention naive or flash");
  if (!by_budget && !by_plan) return;
  const char* source = step_only ? "--step-budget" : by_budget ? "--budget" : "--plan";
  if (by_budget && by_plan)
    throw Error("train", std::string(source) + " and --plan cannot be combined", "--plan FILE trains a plan made under a budget already");
  for (const char* flag : {"--recompute", "--policy", "--save-only", "--save-all-but", "--recompute-last", "--segment-replay"})
    if (given(flag))
      throw Error("train", std::string(source) + " chooses the strategy and policies; " + flag + " cannot be combined with it",
                  std::string("drop ") + flag + " (remat plan prints what the plan does)");
  if (!o.resume.empty())
    throw Error("train", std::string(source) + " cannot be combined with --resume: the checkpoint holds the run's plan",
                std::string("drop ") + source + " to resume with the checkpoint's strategy");
  // A plan is one rank's: its batch is the rank's share of the batch (the ranks run it side by side).
  const int64_t ranks = o.ranks > 0 ? o.ranks : 1;
  if (o.batch <= 0 || o.batch % ranks != 0) return;  // the trainer refuses these with its own message
  const int64_t rank_batch = o.batch / ranks;
  const int64_t micro = o.micro_batch > 0 ? o.micro_batch : rank_batch;
  if (micro <= 0 || rank_batch % micro != 0) return;
  StepPlan plan;
  if (by_budget) {
    const size_t budget = parse_bytes(budget_text, source);
    // --budget is the process's: the step gets what the runtime, the mapped token files and the
    // allocator's rounding leave of it. --step-budget is the step's alone.
    const DataFootprint data = data_footprint(o);
    const ProcessFixed fixed = process_fixed(data.mapped);
    const size_t step_budget = step_only ? budget : step_budget_within(budget, fixed);
    if (step_budget == 0)
      throw Error("train", "--budget " + format_bytes(budget) + " is below what the process needs before any step: " +
                               fixed_description(fixed) + " = " + format_bytes(predicted_process(fixed, 0)),
                  "give --budget more than " + format_bytes(predicted_process(fixed, 0)) + " (remat plan shows the step's share)");
    PlanTarget t{o.model, rank_batch, micro, o.seq, data.accounted, mf.attention_auto(), std::nullopt};
    if (!step_only) t.process = fixed;
    t.per_block_attention = t.allow_flash;  // --attention auto: the kernel per block
    // Under mpirun (cmd_train refuses emulated ranks): every rank plans the last rank's step, the largest.
    if (given("--calibration")) {
      const std::string file = app.get_option("--calibration")->as<std::string>();
      t.calibration = calibration_for(file, o.model, micro, o.seq);
    }
    // --gather fixes the policy; else under ZeRO-3 it is planned with the schedule.
    const RankBudgetPlan rp = plan_rank_budget(t, step_budget, int(ranks), int(o.zero), rank_batch / micro,
                                               o.overlap_reduction,
                                               given("--gather") ? std::optional<bool>(o.hold_gathers) : std::nullopt);
    plan = rp.plan;
    const bool hold = rp.hold;
    if (o.zero == 3 && ranks > 1) o.hold_gathers = hold;
    char time[96] = "";
    if (plan.seconds) std::snprintf(time, sizeof time, ", step time %.1f ms (calibrated)", *plan.seconds * 1e3);
    const std::string share =
        step_only ? "whole step" : "the process: " + fixed_description(fixed) + "; the step gets " + format_bytes(step_budget);
    std::printf("plan for %s %s (%s): %s, attention %s%s; predicted whole step %s (activations alone %s), process %s%s\n",
                source, format_bytes(budget).c_str(), share.c_str(),
                plan.summary.c_str(), attention_label(plan).c_str(),
                o.zero == 3 && ranks > 1 ? (", " + gather_flag(hold)).c_str() : "",
                format_bytes(plan.step.peak_total).c_str(), format_bytes(plan.activation_peak).c_str(),
                format_bytes(predicted_process(fixed, plan.step.peak_total)).c_str(), time);
  } else {
    plan = read_plan_file(plan_file);
    check_plan_target(plan, o.model, mf.given("--attention"), rank_batch, micro, o.seq, omp_get_max_threads(), plan_file);
    plan.step = dry_run_plan(plan, data_bytes_for(o));
    std::printf("plan %s: %s, attention %s; predicted whole step %s (activations alone %s)\n", plan_file.c_str(),
                plan.summary.c_str(), attention_label(plan).c_str(),
                format_bytes(plan.step.peak_total).c_str(), format_bytes(plan.activation_peak).c_str());
  }
  apply_plan(plan, o);
  o.batch = plan.batch * ranks;
}

}  // namespace remat::cli
