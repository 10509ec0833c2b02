// remat train: trains a GPT on the built-in corpus (or --data) and prints the memory/compute report.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <span>
#include <cstdio>

#include "cli/cmd_train.h"
#include "cli/flags.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/threads.h"
#include "core/io_policy.h"
#include "dist/comm.h"
#include "tokenizer/tokenizer.h"
#include "model/sample.h"
#include "model/weights.h"
#include "planner/budget.h"
#include "core/process_memory.h"
#include "data/dataset.h"
#include "planner/zero.h"
#include "train/run_data.h"
#include "train/report.h"
#include "train/run_state.h"
#include "train/summary.h"

namespace remat::cli {

namespace {

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
      .input(o.tokenizer, "--tokenizer", In::Model)
      .input(plan, "--plan")
      .input(calibration, "--calibration")
      .input(o.resume, "--resume", In::Checkpoint)
      .output(o.save, "--save", Out::FileOrFolder)
      .output(o.metrics_out, "--metrics-out", Out::Stream)
      .output(report_json, "--report-json", Out::Stream)
      .output(o.save_dir, "--save-dir", Out::Folder)
      .check();
}

struct TrainFlags {
  ModelFlags model;
  TrainOptions o;
  std::string memory_limit, budget, step_budget, plan, calibration;
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
  add_shared(*app, "--data", f.o.data, "what trains (default: the built-in Shakespeare corpus)");
  add_shared(*app, "--data-format", f.o.data_format, "of --data and --val-data");
  app->add_option("--val-data", f.o.val_data, "Validation data (nanoGPT's val.bin; the same formats as --data): "
                                              "all of --data then trains (default: the last --val-fraction of --data "
                                              "validates)");
  add_shared(*app, "--val-fraction", f.o.val_fraction, "of --data, without --val-data");
  app->add_option("--steps", f.o.steps, "Optimizer steps, at least 1 (0 only with --init-from: evaluate the "
                                        "weights, no training, no memory report)")->capture_default_str();
  add_shared(*app, "--batch", f.o.batch);
  add_shared(*app, "--micro-batch", f.o.micro_batch);
  app->add_option("--lr", f.o.lr, "Peak learning rate (warmup, then cosine to lr/10)")->capture_default_str();
  app->add_option("--warmup", f.o.warmup, "Learning-rate warmup steps (linear from 0 to --lr)")->capture_default_str();
  app->add_option("--lr-decay-steps", f.o.lr_decay_steps, "Steps the cosine decay spans, then the rate stays at "
                                                          "lr/10 (0: --steps); on --resume, what a new --steps does "
                                                          "to the schedule")->capture_default_str();
  app->add_option("--weight-decay", f.o.weight_decay, "AdamW weight decay (2-D weights only)")->capture_default_str();
  app->add_option("--clip", f.o.clip, "Clip the global gradient norm to this (0: off)")->capture_default_str();
  add_seed_option(*app, f.o.seed);
  app->add_option("--eval-every", f.o.eval_every, "Validate every N steps (0: only at the end)")->capture_default_str();
  app->add_option("--eval-batches", f.o.eval_batches, "Batches per validation")->capture_default_str();
  app->add_option("--sample-tokens", f.o.sample_tokens, "Tokens to sample at the end (0: none)")->capture_default_str();
  app->add_option("--save", f.o.save, "Write the weights at the end, atomically, by the path's name: one file if it ends "
                                    "in .safetensors, else a Hugging Face model folder (config.json beside the weights, "
                                    "in shards of at most 2 GiB); --save-dir writes resumable checkpoints")
      ->type_name("FILE|DIR");
  app->add_option("--save-dtype", f.save_dtype, "What --save writes: fp32 (the master weights, exact) or bf16 (half the "
                                                 "size, as Hugging Face files often are); resume checkpoints stay fp32")
      ->capture_default_str();
  add_shared(*app, "--init-from", f.o.init_from,
             "the weights to start from (of a checkpoint, the weights only: a new run); the architecture comes from "
             "the file unless --preset or model flags say otherwise, the block size unless --block-size does");
  app->add_option("--metrics-out", f.o.metrics_out, "Write metrics as JSON lines (step, loss, val_loss, lr, "
                                                    "tokens_per_s, peak_activation_bytes; with ranks, reduce_wait_s; with --zero 3, gather_wait_s); - for stdout. A resumed "
                                                    "run drops the lines past its checkpoint, then appends");
  add_shared(*app, "--recompute", f.o.recompute);
  add_shared(*app, "--budget", f.budget, "train the fastest plan that fits; refused before training when nothing fits");
  add_shared(*app, "--step-budget", f.step_budget, "train the fastest plan whose step fits; refused before training when nothing fits");
  add_shared(*app, "--calibration", f.calibration, "with --budget, plan by its time");
  add_shared(*app, "--plan", f.plan, "train it");
  add_shared_switch(*app, "--recompute-last", f.o.recompute_last);
  {
    const SharedFlag& replay = shared_flag("--segment-replay");
    CLI::Option* o = app->add_option_function<std::string>(
        "--segment-replay", [&f](const std::string& v) { f.o.replay_internals = v == "internals"; }, shared_help(replay, {}));
    o->check(CLI::IsMember({"boundaries", "internals"}));
    finish_shared(o, replay, app->get_name());
  }
  add_shared(*app, "--policy", f.o.policy);
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
  add_shared_switch(*app, "--quiet", f.o.quiet, "the losses, the report's headline and its plain-words summary (--report-json still has it all)");
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
  add_shared(*app, "--tokenizer", f.o.tokenizer,
             "text data through it (default: the --init-from folder's own tokenizer for a model that is not "
             "byte-level, else bytes); the end-of-run sample is decoded with it");
  add_shared(*app, "--ranks", f.o.ranks,
             "without mpirun, this process runs every rank's micro-batches and sums their gradients in rank order, "
             "bit-identical to mpirun -np N");
  add_shared(*app, "--zero", f.o.zero, "2 is not supported");
  app->add_option_function<std::string>(
         "--gather",
         [&f](const std::string& v) {
           if (v != "hold" && v != "regather")
             throw Error("cli", "--gather must be hold or regather, got '" + v + "'", "e.g. --gather regather");
           f.o.hold_gathers = v == "hold";
         },
         "With --zero 3: a block replayed before its backward, with other blocks between, stays gathered until "
         "its backward (hold) or is gathered again for it (regather: less memory, more all-gathers); no bit changes")
      ->type_name("POLICY")
      ->default_str("hold");
  app->add_flag("--no-overlap", [&f](int64_t) { f.o.overlap_reduction = false; },
                "With ranks: start every gradient reduction after the whole backward instead of as each block's "
                "backward ends, and under --zero 3 gather no block ahead of its action (a benchmark of how much "
                "communication the step hides)");
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
    // A training checkpoint starts a new run from its weights (--resume continues the run itself).
    if (const std::optional<std::string> w = checkpoint_weights(f.o.init_from)) f.o.init_from = *w;
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
    if (given("--budget") && given("--step-budget"))
      throw Error("train", "--budget and --step-budget cannot be combined",
                  "--budget bounds the process, --step-budget the accounted step alone: give one");
    const char* budget_flag = given("--step-budget") ? "--step-budget" : "--budget";
    const bool has_budget = given("--budget") || given("--step-budget");
    if (given("--step-budget")) f.budget = f.step_budget;
    if (has_budget) {
      const size_t budget = parse_bytes(f.budget, budget_flag);  // a bad budget is a flag error, whatever the model
      if (given("--memory-limit") && f.o.memory_limit < budget)
        throw Error("train", "--memory-limit " + f.memory_limit + " is below " + budget_flag + " " + f.budget +
                                 ": a plan that uses its budget would be stopped by the limit",
                    "give --memory-limit at least the budget, or plan for a smaller --budget");
    }
    f.o.save_dtype = parse_precision(f.save_dtype, "--save-dtype");  // fp16 refused, as for --precision
    if (given("--save-dtype") && f.o.save.empty())
      throw Error("train", "--save-dtype says how --save writes the weights, and --save is not given",
                  "add --save FILE, or drop --save-dtype");
    const dist::Comm& world = dist::Comm::world();
    if (world.size() > 1 && !given("--ranks")) f.o.ranks = world.size();
    if (has_budget && f.o.ranks > 1 && world.size() != f.o.ranks)
      throw Error("train", std::string(budget_flag) + " plans the step of one rank of mpirun -np " + std::to_string(f.o.ranks) +
                               "; --ranks " + std::to_string(f.o.ranks) + " in one process runs every rank's micro-batches",
                  "run it as mpirun -np " + std::to_string(f.o.ranks) + " remat train --budget ..., or drop --ranks");
    if (world.rank() != 0) {  // rank 0 prints and writes; the others train beside it
      f.o.progress = false;
      f.o.quiet = true;
      f.o.metrics_out.clear();
      f.o.save.clear();
      f.report_json.clear();
    }
    // The cores other busy processes leave, unless --threads or the environment fixes the count.
    threads::enable_unless_fixed(given("--threads"), world.rank() == 0 ? stderr : nullptr);
    if (!f.o.resume.empty()) {
      merge_resume(*app, f.model, f.o);
    } else {
      // With --init-from, the architecture and block size come from the file unless flags say otherwise.
      f.o.model = f.o.init_from.empty() ? f.model.config() : f.model.config_for_file(f.o.init_from);
      f.o.seq = f.model.seq(f.o.model);
    }
    // A model that came with a tokenizer reads text through it (unless --tokenizer says otherwise).
    if (!given("--tokenizer") && f.o.resume.empty() && !byte_level(f.o.model))
      if (const std::optional<std::string> t = tok::model_tokenizer(f.o.init_from)) f.o.tokenizer = *t;
    if (f.o.tokenizer == "bytes") f.o.tokenizer.clear();
    // Fail now, not after the whole run, when an output cannot be written; and before the data is
    // read (a FIFO would block), which --budget's planning does.
    check_outputs(f.o, f.report_json, f.plan, given("--calibration") ? app->get_option("--calibration")->as<std::string>() : "");
    check_sizes(f.o.model, f.o.micro_batch > 0 ? f.o.micro_batch : f.o.batch, f.o.seq, 16.0);
    apply_budget_or_plan(*app, f.model, f.budget, f.plan, f.o);
    f.o.progress = !f.no_progress && world.rank() == 0;
    f.o.stop = &g_stop_signal;
    f.o.saving = &g_saving;
    if (given("--gather") && (f.o.zero != 3 || f.o.ranks < 2))
      throw Error("train", "--gather says when ZeRO-3 gathers the blocks' parameters, and this run shards none (--zero " +
                               std::to_string(f.o.zero) + ", " + std::to_string(f.o.ranks) + " rank(s)): it would change nothing",
                  "run it as mpirun -np N remat train --zero 3 --gather ..., or drop --gather");
    Trainer t(f.o);
    const ProcessFixed fixed = process_fixed(data::TokenDataset::live_mapped_bytes());
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
    // The step's freed blocks are not needed again: give them back before the report's planning (its
    // dry runs use the heap), so that it cannot raise the process's peak.
    Allocator::global().release_cache();
    if (s.stopped) {
      std::string saved;
      if (s.saved) saved += "weights to " + f.o.save;
      if (!s.checkpoint.empty()) saved += (saved.empty() ? "" : ", ") + std::string("checkpoint ") + s.checkpoint;
      std::fflush(stdout);
      if (world.rank() == 0)  // under mpirun every rank stopped at the same step; rank 0 saved
        std::fprintf(stderr, "interrupted at step %lld: saved %s (%s)\n", (long long)s.steps_done,
                     saved.empty() ? "nothing (no --save or --save-dir given)" : saved.c_str(),
                     signal_name(s.stop_signal));
      std::fflush(nullptr);
      // Everything is on disk and flushed; skip the destructors of live training state (under
      // mpirun, once every rank is here).
      world.exit_together(128 + s.stop_signal);
    }
    // Under mpirun, every rank's whole step as its own dry run predicted it and as its allocator measured
    // it (each rank's chunks differ by an element at most): rank 0 prints them all.
    std::string per_rank;
    if (world.size() > 1 && s.steps_done > s.start_step && s.measure.whole_step) {
      const double mine[2] = {double(s.measure.whole_step->peak_total), double(s.measure.peak_total)};
      const std::vector<double> all = world.allgather(std::span<const double>(mine, 2));
      bool exact = true;
      for (int r = 0; r < world.size(); ++r) {
        const size_t want = size_t(all[size_t(2 * r)]), got = size_t(all[size_t(2 * r + 1)]);
        exact = exact && want == got;
        per_rank += (r ? ", rank " : "rank ") + std::to_string(r) + " " + format_bytes(got) +
                    (want == got ? "" : " (predicted " + format_bytes(want) + ")");
      }
      per_rank = "whole step of each rank, measured: " + per_rank +
                 (exact ? "; each as its rank predicted, to the byte\n" : "; not as predicted\n");
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
    ReportInput ri = report_input(t, s);
  // the run's schedule, policies and kernels per block included
    if (given("--compare-none")) compare_against_none(ri, f.o);  // measured step times, into the report
    std::printf("%s", f.o.quiet ? (report_headline(ri) + "\n").c_str() : memory_report(ri).c_str());
    if (const auto g = t.last_gathers(); g && !f.o.quiet) {
      // Counted by the run against the schedule's count, and against the three gathers a block
      // (forward, replay, backward) that PyTorch FSDP with activation checkpointing makes (its issue 105635).
      const Schedule& run = ri.schedule ? *ri.schedule : t.step_options().schedule;
      const int64_t per_rank = f.o.batch / f.o.ranks / t.micro_batch();
      const int64_t every = std::count_if(run.begin(), run.end(), [](const Action& a) { return a.kind != Action::Kind::Free; });
      const planner::GatherCount want = planner::zero3_gathers(run, f.o.hold_gathers);
      std::printf("ZeRO-3 on rank 0: %lld all-gathers of blocks' parameters in the last step (the schedule's count: "
                  "%lld; --gather %s), %s received; a block gathered for each forward, replay and backward would "
                  "be %lld\n",
                  (long long)g->count, (long long)((want.forward + want.backward) * per_rank),
                  f.o.hold_gathers ? "hold" : "regather", format_bytes(size_t(g->bytes)).c_str(),
                  (long long)(per_rank * every));
    }
    if (!f.o.quiet) std::printf("%s", per_rank.c_str());
    if (!f.o.save.empty()) std::printf("weights written to %s\n", f.o.save.c_str());
    size_t step_predicted = s.measure.whole_step ? s.measure.whole_step->peak_total : s.measure.peak_total;
    {
      // One rank's step (its share of the batch); the budget planner plans one process, so with ranks
      // it is not suggested.
      const int64_t rank_batch = f.o.batch / f.o.ranks;
      const PlanTarget target{f.o.model, rank_batch, t.micro_batch(), t.seq(), data_bytes_for(f.o), false, std::nullopt};
      std::printf("%s", plain_summary(ri, target, fixed, f.o.ranks == 1).c_str());
      // The end-of-run sample runs beside the model's state (its prompt is a token or two).
      if (f.o.sample_tokens > 0 && s.measure.whole_step)
        step_predicted = std::max(step_predicted, s.measure.whole_step->persistent +
                                                      generation_bytes(t.model(), 2, f.o.sample_tokens));
      // --compare-none ran two more trainers, one after the other, beside this one's state.
      if (given("--compare-none") && s.measure.whole_step)
        step_predicted = s.measure.whole_step->persistent + std::max(step_predicted, store_all_whole_step(target));
    }
    // The process at its highest (the step, validation, saves, the sample and
    // the summary's planning), beside the prediction.
    const size_t process_budget = given("--budget") ? parse_bytes(f.budget, "--budget") : 0;  // not --step-budget
    // The accounted peak of the whole process: the step's, or --compare-none's store-everything step
    // beside this run's state.
    const bool compared = given("--compare-none");
    const ProcessMemory pm = measure_process(std::max(s.measure.peak_total, Allocator::global().peak_total_ever()),
                                             predicted_process(fixed, step_predicted), process_budget);
    std::printf("%s\n", process_line(pm, "--budget", compared ? "accounted (with --compare-none's steps)" : "accounted step").c_str());
    if (world.size() > 1) {  // every rank's process, printed by rank 0
      const double mine[2] = {double(pm.peak_rss), double(pm.predicted)};
      const std::vector<double> all = world.allgather(std::span<const double>(mine, 2));
      std::string ranks = "process peak of each rank:";
      for (int r = 0; r < world.size(); ++r)
        ranks += (r ? ", rank " : " rank ") + std::to_string(r) + " " + format_bytes(size_t(all[size_t(2 * r)])) +
                 " (predicted " + format_bytes(size_t(all[size_t(2 * r + 1)])) + ")";
      std::printf("%s\n", ranks.c_str());
    }
    if (!f.report_json.empty()) {  // last: with --report-json -, the JSON ends stdout
      nlohmann::json j = report_json(ri);
      j["val_loss_first"] = s.first_val;
      j["val_loss_last"] = s.last_val;
      j["tokens_per_s"] = s.tokens_per_s;
      j["process"] = process_json(pm);
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
