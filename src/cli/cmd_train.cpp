// remat train: trains a GPT on the built-in corpus (or --data) and prints the memory/compute report.
#include <omp.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <thread>
#include <vector>

#include "cli/flags.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/io_policy.h"
#include "core/signal_point.h"
#include "model/weights.h"
#include "planner/budget.h"
#include "train/run_data.h"
#include "train/report.h"
#include "train/run_state.h"
#include "train/summary.h"

namespace remat::cli {

namespace {

// Signals. Every signal a user or the system sends to end a run (SIGINT, SIGTERM, SIGHUP, SIGPIPE,
// SIGXCPU) ends it cleanly, with the conventional exit status 128 + the signal's number:
//  - before training begins (reading flags, data and checkpoints, building the model) nothing is
//    trained and nothing written: the process exits at once;
//  - from then on the first signal is recorded in g_stop_signal, which the trainer polls between
//    steps, between validation batches and between sampled tokens: it stops there, writes the
//    checkpoint and --save, and returns. A second SIGINT exits at once, except while a checkpoint
//    is being written (g_saving), which it lets finish.
// The signals are blocked in every thread (the OpenMP and oneDNN threads inherit the mask) and taken
// by one thread in sigwait(): no handler ever interrupts a kernel. An asynchronous handler corrupted
// the heap now and then, because its signal frame is written below the stack pointer of the
// interrupted code, where oneDNN's JIT gemm keeps data. The handler below only serves a thread that
// existed before the mask was set; it runs on an alternate stack for the same reason. A SIGPIPE a
// write raises is the writing thread's own and stays pending there; the write fails with EPIPE,
// which the output checks report.
std::atomic<int> g_stop_signal{0};
std::atomic<int> g_saving{0};
std::atomic<bool> g_training{false};
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGXCPU};

const char* signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    case SIGPIPE: return "SIGPIPE";
    case SIGXCPU: return "SIGXCPU";
    default: return "a signal";
  }
}

void on_stop(int sig) {  // async-signal-safe: write() and _exit() only
  if (!g_training.load()) {
    const char* parts[] = {"remat: ", signal_name(sig), " before training began: nothing was trained or written\n"};
    for (const char* p : parts) (void)!::write(2, p, std::strlen(p));
    _exit(128 + sig);
  }
  if (g_stop_signal.load() != 0 && sig == SIGINT && g_saving.load() == 0) _exit(130);
  int none = 0;
  g_stop_signal.compare_exchange_strong(none, sig);  // the first signal gives the exit status
}

extern "C" void on_stop_signal(int sig) { on_stop(sig); }

void install_signal_handlers() {
  // Past `ulimit -f`, a write fails with EFBIG (reported as an error) instead of killing the process.
  std::signal(SIGXFSZ, SIG_IGN);
  static std::vector<char> alt(size_t(1) << 18);
  stack_t ss{};
  ss.ss_sp = alt.data();
  ss.ss_size = alt.size();
  sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART | SA_ONSTACK;
  sigset_t set;
  sigemptyset(&set);
  for (const int sig : kStopSignals) {
    sigaction(sig, &sa, nullptr);
    sigaddset(&set, sig);
  }
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  set_signal_taken(&g_stop_signal);
  std::thread([set]() {
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) == 0) on_stop(sig);
    }
  }).detach();
}

namespace fs = std::filesystem;

// Inputs and outputs checked before any work (core/io_policy.h): no output is an input or another
// output, none is a device or FIFO (--metrics-out and --report-json take - for stdout), each can be
// written, and no input is a FIFO, socket or device.
void check_outputs(const TrainOptions& o, const std::string& report_json, const std::string& plan,
                   const std::string& calibration) {
  using In = IoPolicy::In;
  using Out = IoPolicy::Out;
  IoPolicy()
      .input(o.data, "--data")
      .input(o.val_data, "--val-data")
      .input(o.init_from, "--init-from", In::Model)
      .input(plan, "--plan")
      .input(calibration, "--calibration")
      .input(o.resume, "--resume", In::Checkpoint)
      .output(o.save, "--save", Out::FileOrFolder)
      .output(o.metrics_out, "--metrics-out", Out::Stream)
      .output(report_json, "--report-json", Out::Stream)
      .output(o.save_dir, "--save-dir", Out::Folder)
      .check();
}

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

// --budget SIZE / --plan FILE: the strategy and policies come from a plan (planner/budget.h), made
// here for the whole step under the budget, or read from `remat plan --out`. Either excludes the
// flags that choose a strategy or a policy by hand.
void apply_budget_or_plan(CLI::App& app, const ModelFlags& mf, const std::string& budget_text, const std::string& plan_file,
                          TrainOptions& o) {
  auto given = [&](const char* name) {
    const CLI::Option* op = app.get_option_no_throw(name);
    return op && op->count() > 0;
  };
  const bool by_budget = given("--budget"), by_plan = given("--plan");
  if (given("--calibration") && !by_budget)
    throw Error("train", "--calibration is the time model --budget plans with", "add --budget SIZE, or drop --calibration");
  if (mf.attention_auto() && !by_budget)
    throw Error("train", "--attention auto lets the planner choose the kernel, and needs --budget",
                "add --budget SIZE, or choose --attention naive or flash");
  if (!by_budget && !by_plan) return;
  if (by_budget && by_plan)
    throw Error("train", "--budget and --plan cannot be combined", "--plan FILE trains a plan made under a budget already");
  const char* source = by_budget ? "--budget" : "--plan";
  for (const char* flag : {"--recompute", "--policy", "--save-only", "--save-all-but", "--recompute-last", "--segment-replay"})
    if (given(flag))
      throw Error("train", std::string(source) + " chooses the strategy and policies; " + flag + " cannot be combined with it",
                  std::string("drop ") + flag + " (remat plan prints what the plan does)");
  if (!o.resume.empty())
    throw Error("train", std::string(source) + " cannot be combined with --resume: the checkpoint holds the run's plan",
                std::string("drop ") + source + " to resume with the checkpoint's strategy");
  const int64_t micro = o.micro_batch > 0 ? o.micro_batch : o.batch;
  if (o.batch <= 0 || micro <= 0 || o.batch % micro != 0) return;  // the trainer refuses these with its own message
  StepPlan plan;
  if (by_budget) {
    const size_t budget = parse_bytes(budget_text, "--budget");
    PlanTarget t{o.model, o.batch, micro, o.seq, data_bytes_for(o), mf.attention_auto(), std::nullopt};
    t.per_block_attention = t.allow_flash;  // --attention auto: the kernel per block
    if (given("--calibration")) {
      const std::string file = app.get_option("--calibration")->as<std::string>();
      t.calibration = calibration_for(file, o.model, micro, o.seq);
    }
    plan = plan_for_budget(t, budget);
    char time[96] = "";
    if (plan.seconds) std::snprintf(time, sizeof time, ", step time %.1f ms (calibrated)", *plan.seconds * 1e3);
    std::printf("plan for --budget %s (whole step): %s, attention %s; predicted whole step %s (activations alone %s)%s\n",
                format_bytes(budget).c_str(), plan.summary.c_str(), attention_label(plan).c_str(),
                format_bytes(plan.step.peak_total).c_str(), format_bytes(plan.activation_peak).c_str(), time);
  } else {
    plan = read_plan_file(plan_file);
    check_plan_target(plan, o.model, mf.given("--attention"), o.batch, micro, o.seq, omp_get_max_threads(), plan_file);
    plan.step = dry_run_plan(plan, data_bytes_for(o));
    std::printf("plan %s: %s, attention %s; predicted whole step %s (activations alone %s)\n", plan_file.c_str(),
                plan.summary.c_str(), attention_label(plan).c_str(),
                format_bytes(plan.step.peak_total).c_str(), format_bytes(plan.activation_peak).c_str());
  }
  apply_plan(plan, o);
}

struct TrainFlags {
  ModelFlags model;
  TrainOptions o;
  std::string memory_limit, budget, plan;
  std::string save_dtype = "fp32";
  bool no_progress = false;
  std::string report_json;
};
}  // namespace

void add_train(CLI::App& root) {
  auto flags = std::make_shared<TrainFlags>();
  CLI::App* app = root.add_subcommand("train", "Train a GPT and print the memory/compute report");
  TrainFlags& f = *flags;
  f.model.allow_auto_attention = true;
  f.model.add_to(*app, kDefaultPreset);
  app->add_option("--data", f.o.data, "Training data: a text file (byte-level), a raw uint16 .bin token "
                                      "file (nanoGPT) or an llm.c token file (v1 uint16, v2 uint32); default: the "
                                      "built-in Shakespeare corpus");
  app->add_option("--data-format", f.o.data_format, "How to read --data and --val-data: auto (llm.c files by their "
                                                    "magic, other *.bin as raw uint16, the rest as byte-level text), "
                                                    "text, u16, llmc")->capture_default_str();
  app->add_option("--val-data", f.o.val_data, "Validation data (nanoGPT's val.bin; the same formats as --data): "
                                              "all of --data then trains (default: the last --val-fraction of --data "
                                              "validates)");
  app->add_option("--val-fraction", f.o.val_fraction, "Without --val-data: the fraction of --data held out at its "
                                                      "end for validation, between 0 and 1")->capture_default_str();
  app->add_option("--steps", f.o.steps, "Optimizer steps, at least 1 (0 only with --init-from: evaluate the "
                                        "weights, no training, no memory report)")->capture_default_str();
  app->add_option("--batch", f.o.batch, "B: sequences per optimizer step")->capture_default_str();
  app->add_option("--micro-batch", f.o.micro_batch, "b: sequences per forward; B/b micro-steps accumulate gradients "
                                                     "(default: b = B)");
  app->add_option("--lr", f.o.lr, "Peak learning rate (warmup, then cosine to lr/10)")->capture_default_str();
  app->add_option("--warmup", f.o.warmup, "Warmup steps")->capture_default_str();
  app->add_option("--lr-decay-steps", f.o.lr_decay_steps, "Steps the cosine decay spans, then the rate stays at "
                                                          "lr/10 (0: --steps); on --resume, what a new --steps does "
                                                          "to the schedule")->capture_default_str();
  app->add_option("--weight-decay", f.o.weight_decay, "AdamW weight decay (2-D weights only)")->capture_default_str();
  app->add_option("--clip", f.o.clip, "Clip the global gradient norm to this (0: off)")->capture_default_str();
  add_seed_option(*app, f.o.seed, "Seed for init, batches and dropout (0 to 2^63-1)");
  app->add_option("--eval-every", f.o.eval_every, "Validate every N steps (0: only at the end)")->capture_default_str();
  app->add_option("--eval-batches", f.o.eval_batches, "Batches per validation")->capture_default_str();
  app->add_option("--sample-tokens", f.o.sample_tokens, "Tokens to sample at the end (0: none)")->capture_default_str();
  app->add_option("--save", f.o.save, "Write the weights to this .safetensors file (atomically)");
  app->add_option("--save-dtype", f.save_dtype, "What --save writes: fp32 (the master weights, exact) or bf16 (half the "
                                                 "size, as Hugging Face files often are); resume checkpoints stay fp32")
      ->capture_default_str();
  app->add_option("--init-from", f.o.init_from, "Start from weights in a .safetensors file (a Hugging Face GPT-2 "
                                                "model.safetensors loads as it is); the architecture comes from the file "
                                                "unless --preset or model flags say otherwise, the block size unless "
                                                "--block-size does");
  app->add_option("--metrics-out", f.o.metrics_out, "Write metrics as JSON lines (step, loss, val_loss, lr, "
                                                    "tokens_per_s, peak_activation_bytes); - for stdout. A resumed "
                                                    "run drops the lines past its checkpoint, then appends");
  app->add_option("--recompute", f.o.recompute, "Checkpoint strategy: none | all | block | sqrt | uniform:K | "
                                                "segments:a,b,...")->capture_default_str();
  app->add_option("--budget", f.budget, std::string("Plan for this byte budget of the whole step (parameters, "
                                                    "gradients, AdamW state, data, activations, their gradients, "
                                                    "transients, workspace) and train the fastest plan that fits, "
                                                    "e.g. 2GiB; refused before training when nothing fits; ") +
                                            kByteUnitsHelp);
  app->add_option("--calibration", "With --budget: plan by this machine's calibrated time (remat calibrate --out "
                                   "FILE, made for this model, micro-batch, seq and thread count) instead of FLOPs");
  app->add_option("--plan", f.plan, "Train the plan in this file (remat plan ... --budget SIZE --out FILE), made for "
                                    "this model, batch, micro-batch and seq");
  app->add_flag("--recompute-last", f.o.recompute_last, "Also recompute the last segment (the textbook count)");
  app->add_option_function<std::string>("--segment-replay", [&f](const std::string& v) {
    f.o.replay_internals = v == "internals";
  }, "How a checkpointed segment is replayed: boundaries (keep block inputs, then each block's internals just before its backward: least memory) or internals (keep every block's internals in the one replay: least compute)")->check(CLI::IsMember({"boundaries", "internals"}));
  app->add_option("--policy", f.o.policy, "Selective recomputation inside stored blocks, a preset of the "
                                          "model: none | selective (drop the attention scores) | gelu | norms "
                                          "(GPT-2) | swiglu | norms (LLaMA)")->capture_default_str();
  app->add_option("--save-only", f.o.save_only, "Keep only these named block tensors (comma-separated names "
                                                "within a block, as the report's block table lists them); rebuild "
                                                "the rest that one op can rebuild");
  app->add_option("--save-all-but", f.o.save_all_but, "Drop these named block tensors and rebuild them in "
                                                      "backward (names within a block, as the report lists them)");
  app->add_flag("--determinism-check", f.o.check_determinism,
                "Compare every recomputed tensor with the original forward; fail on the first difference");
  app->add_flag("--debug-break-replay", f.o.break_replay,
                "Debugging: draw a fresh dropout stream on recompute (a replay that is not exact, which "
                "--determinism-check catches)");
  app->add_option("--memory-limit", f.memory_limit, std::string("Hard limit on all accounted bytes, e.g. 2GiB, 1.5G, "
                                                                "3GB; ") + kByteUnitsHelp + " (default: no limit)");
  app->add_flag("--no-progress", f.no_progress, "No progress line on stderr");
  app->add_flag("--quiet", f.o.quiet, "Print only the losses, the report's headline and its plain-words summary: "
                                      "no progress, no per-category report (--report-json still has it all)");
  app->add_option("--progress-every", f.o.progress_every, "When stderr is not a terminal (a log file, a pipe): a "
                                                          "progress line at least every this many seconds, besides "
                                                          "the evaluations (0: every step)")->capture_default_str();
  app->add_option("--report-json", f.report_json, "Also write the report as JSON to this file (- for stdout)");
  app->add_flag("--compare-none")->description("After training, time a few steps of store-everything (strategy none) and of this "
                                  "run's strategy on the same batches, in fresh trainers (the run's weights and losses "
                                  "are untouched), for the report's measured step-time overhead");
  app->add_option("--save-dir", f.o.save_dir, "Write training checkpoints (weights, AdamW moments, step, options) "
                                              "into DIR/step-NNNNNN folders: every --save-every steps, at the end "
                                              "and when interrupted");
  app->add_option("--save-every", f.o.save_every, "Checkpoint every N steps into --save-dir (0: only at the end)")
      ->capture_default_str();
  app->add_option("--keep", f.o.keep, "Checkpoints kept in --save-dir (older ones are deleted once the new one is "
                                      "complete)")->capture_default_str();
  app->add_option("--resume", f.o.resume, "Continue a run from its --save-dir (the newest checkpoint) or a "
                                          "step-NNNNNN folder, bit-identically; model and training flags come "
                                          "from the checkpoint (--steps may be raised)");
  app->add_flag("--skip-nonfinite", f.o.skip_nonfinite, "Skip (and count) a step whose loss or gradient norm is "
                                                        "NaN or infinite instead of stopping the run");
  app->callback([flags, app]() {
    TrainFlags& f = *flags;
    install_signal_handlers();  // first: before any thread is created
    f.model.apply_threads();
    auto given = [&](const char* name) {
      const CLI::Option* op = app->get_option_no_throw(name);
      return op && op->count() > 0;
    };
    // --steps 0 only evaluates --init-from weights: without them it would report on a run that never ran.
    if (f.o.steps < 1 && !(f.o.steps == 0 && !f.o.init_from.empty()) && (f.o.resume.empty() || given("--steps")))
      throw Error("train", "--steps must be at least 1, got " + std::to_string(f.o.steps),
                  "e.g. --steps 200 (--steps 0 only with --init-from, to evaluate weights)");
    if (f.o.steps == 0 && !f.report_json.empty())
      throw Error("train", "--report-json needs at least one step (--steps 0 has no memory report)",
                  "give --steps 1 or more, or drop --report-json");
    if (f.o.steps == 0 && given("--compare-none"))
      throw Error("train", "--compare-none needs at least one step (--steps 0 has no memory report)",
                  "give --steps 1 or more, or drop --compare-none");
    if (given("--val-data") && f.o.val_data.empty())
      throw Error("train", "--val-data is empty", "give a file, e.g. --val-data val.bin");
    if (given("--val-data") && given("--val-fraction"))
      throw Error("train", "--val-data and --val-fraction cannot be combined",
                  "--val-data validates on its own file (all of --data trains); --val-fraction splits --data");
    if (given("--micro-batch") && f.o.micro_batch <= 0)  // 0 would silently mean the whole batch
      throw Error("train", "--micro-batch must be positive, got " + std::to_string(f.o.micro_batch),
                  "e.g. --micro-batch 2, or omit it for one micro-batch of the whole --batch");
    if (given("--memory-limit")) f.o.memory_limit = parse_bytes(f.memory_limit, "--memory-limit");
    if (given("--budget")) {
      const size_t budget = parse_bytes(f.budget, "--budget");  // a bad budget is a flag error, whatever the model
      if (given("--memory-limit") && f.o.memory_limit < budget)
        throw Error("train", "--memory-limit " + f.memory_limit + " is below --budget " + f.budget +
                                 ": a plan that uses its budget would be stopped by the limit",
                    "give --memory-limit at least the budget, or plan for a smaller --budget");
    }
    f.o.save_dtype = parse_precision(f.save_dtype, "--save-dtype");  // fp16 refused, as for --precision
    if (given("--save-dtype") && f.o.save.empty())
      throw Error("train", "--save-dtype says how --save writes the weights, and --save is not given",
                  "add --save FILE, or drop --save-dtype");
    if (!f.o.resume.empty()) {
      merge_resume(*app, f.model, f.o);
    } else {
      // With --init-from, the architecture and block size come from the file unless flags say otherwise.
      f.o.model = f.o.init_from.empty() ? f.model.config() : f.model.config_for_file(f.o.init_from);
      f.o.seq = f.model.seq(f.o.model);
    }
    // Fail now, not after the whole run, when an output cannot be written; and before the data is
    // read (a FIFO would block), which --budget's planning does.
    check_outputs(f.o, f.report_json, f.plan, given("--calibration") ? app->get_option("--calibration")->as<std::string>() : "");
    check_sizes(f.o.model, f.o.micro_batch > 0 ? f.o.micro_batch : f.o.batch, f.o.seq, 16.0);
    apply_budget_or_plan(*app, f.model, f.budget, f.plan, f.o);
    f.o.progress = !f.no_progress;
    f.o.stop = &g_stop_signal;
    f.o.saving = &g_saving;
    Trainer t(f.o);
    for (const char* flag : {"--recompute-last", "--segment-replay"})
      if (given(flag) && t.strategy().name == "none")
        throw Error("train", std::string(flag) + " says how checkpointed segments are recomputed, and strategy none "
                                                 "has none: it would change nothing",
                    "add a strategy (--recompute block, sqrt, all, uniform:K), or drop " + std::string(flag));
    if (f.o.memory_limit > 0 && f.o.steps > 0) {  // the dry run knows before step 1 whether it fits
      const size_t need = t.predicted_memory().peak_total;
      if (need > f.o.memory_limit)
        throw Error("memory", "--memory-limit " + f.memory_limit + " (" + std::to_string(f.o.memory_limit) +
                                  " B) is below this run's whole step, " + format_bytes(need) + " (" +
                                  std::to_string(need) + " B) by the dry run of its step",
                    "raise --memory-limit to at least " + format_bytes(need) +
                        ", or pass --budget to plan a step that fits (remat plan shows the trade)");
    }
    std::printf("remat train: %s, %lld params, dropout %.2f, attention %s\n", f.o.model.describe().c_str(),
                (long long)t.model().num_params(), f.o.model.dropout,
                attention_label(f.o.model.attention, f.o.block_attention).c_str());
    std::printf("data: %s\n", t.data_description().c_str());
    std::printf("strategy %s, policy %s, batch %lld = %lld micro-batch(es) of %lld, seq %lld, %lld steps\n",
                t.strategy().label().c_str(), t.policy().label().c_str(), (long long)f.o.batch,
                (long long)(f.o.batch / (f.o.micro_batch ? f.o.micro_batch : f.o.batch)),
                (long long)(f.o.micro_batch ? f.o.micro_batch : f.o.batch), (long long)f.o.seq, (long long)f.o.steps);
    std::fflush(stdout);
    g_training.store(true);  // from here a signal stops the run at the next safe point, saving it
    TrainSummary s = t.run();
    if (s.stopped) {
      std::string saved;
      if (s.saved) saved += "weights to " + f.o.save;
      if (!s.checkpoint.empty()) saved += (saved.empty() ? "" : ", ") + std::string("checkpoint ") + s.checkpoint;
      std::fflush(stdout);
      std::fprintf(stderr, "interrupted at step %lld: saved %s (%s)\n", (long long)s.steps_done,
                   saved.empty() ? "nothing (no --save or --save-dir given)" : saved.c_str(),
                   signal_name(g_stop_signal.load()));
      std::fflush(nullptr);
      // Everything is on disk and flushed; skip the destructors of live training state.
      _exit(128 + g_stop_signal.load());
    }
    if (s.skipped > 0) std::printf("%lld step(s) skipped as non-finite (--skip-nonfinite)\n", (long long)s.skipped);
    if (!s.checkpoint.empty()) std::printf("checkpoint written to %s\n", s.checkpoint.c_str());
    std::printf("val loss %.4f -> %.4f nats/token; last step %.0f tokens/s\n", s.first_val, s.last_val, s.tokens_per_s);
    if (!s.sample.empty()) std::printf("sample:\n%s\n", s.sample.c_str());
    if (s.steps_done == s.start_step) {  // --steps 0: evaluation only, no step to report on
      std::printf("no training step ran (--steps 0): no memory report\n");
      if (!f.o.save.empty()) std::printf("weights written to %s\n", f.o.save.c_str());
      return;
    }
    ReportInput ri = report_input(t, s);  // the run's schedule, policies and kernels per block included
    if (given("--compare-none")) compare_against_none(ri, f.o);  // measured step times, into the report
    std::printf("%s", f.o.quiet ? (report_headline(ri) + "\n").c_str() : memory_report(ri).c_str());
    if (!f.o.save.empty()) std::printf("weights written to %s\n", f.o.save.c_str());
    {
      const int64_t micro = f.o.micro_batch > 0 ? f.o.micro_batch : f.o.batch;
      const PlanTarget target{f.o.model, f.o.batch, micro, t.seq(), data_bytes_for(f.o), false, std::nullopt};
      std::printf("%s", plain_summary(ri, target).c_str());
    }
    if (!f.report_json.empty()) {  // last: with --report-json -, the JSON ends stdout
      nlohmann::json j = report_json(ri);
      j["val_loss_first"] = s.first_val;
      j["val_loss_last"] = s.last_val;
      j["tokens_per_s"] = s.tokens_per_s;
      std::fflush(stdout);
      write_file_atomic(f.report_json, j.dump(2) + "\n");
    }
    if (const int sig = g_stop_signal.load()) {  // taken after the run had saved everything
      std::fflush(nullptr);
      _exit(128 + sig);
    }
  });
}

}  // namespace remat::cli
