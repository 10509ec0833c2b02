// remat trace: the event order of one training step (spec self-test (c)), with live activation bytes,
// then the optimizer step; with --svg, the same step as a picture of live bytes per category
// (viz/svg.h). The step holds what Trainer::step holds (the data, a micro-batch's token buffers,
// AdamW's moments), so its measured whole-step peak is the one a budget counts.
#include <omp.h>
#include <algorithm>
#include <cstdio>
#include <optional>
#include <random>

#include "cli/flags.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/io_policy.h"
#include "planner/planner.h"
#include "planner/budget.h"
#include "data/dataset.h"
#include "step/step.h"
#include "viz/svg.h"

namespace remat::cli {

namespace {
struct TraceFlags {
  ModelFlags model;
  std::string recompute = "block";
  bool recompute_last = false;
  std::string segment_replay = "boundaries";
  std::string policy = "none";
  int64_t batch = 8, micro_batch = 0;
  std::string svg;
  bool svg_persistent = false;
  std::string plan;  // a plan file (remat plan --budget SIZE --out FILE)
};

// The live bytes of every category, now.
std::array<size_t, kNumCategories> live_now() {
  std::array<size_t, kNumCategories> live{};
  for (int c = 0; c < kNumCategories; ++c) live[size_t(c)] = Allocator::global().active(Category(c));
  return live;
}

// The phase an event belongs to, from its first word (train/step.cpp and describe(Action) name
// them): "forward", "recompute", "backward"; freeing a checkpoint happens in the backward phase.
TimelineSample::Phase phase_of(const std::string& event, TimelineSample::Phase previous) {
  if (event.rfind("forward", 0) == 0) return TimelineSample::Phase::Forward;
  if (event.rfind("recompute", 0) == 0) return TimelineSample::Phase::Recompute;
  if (event.rfind("backward", 0) == 0 || event.rfind("free", 0) == 0) return TimelineSample::Phase::Backward;
  return previous;
}
}  // namespace

void add_trace(CLI::App& root) {
  auto flags = std::make_shared<TraceFlags>();
  CLI::App* app = root.add_subcommand("trace", "Print the event order of one training step: every forward, "
                                               "recompute and backward, block by block");
  TraceFlags& f = *flags;
  f.model.add_to(*app, kDefaultPreset);
  f.model.add_shape_from(*app);
  add_shared(*app, "--recompute", f.recompute);
  add_shared_switch(*app, "--recompute-last", f.recompute_last);
  add_shared(*app, "--segment-replay", f.segment_replay)->check(CLI::IsMember({"boundaries", "internals"}));
  add_shared(*app, "--policy", f.policy);
  add_shared(*app, "--batch", f.batch);
  add_shared(*app, "--micro-batch", f.micro_batch, "one micro-step is traced, the other B/b - 1 repeat its events");
  add_shared(*app, "--svg", f.svg, "live bytes per category over the step's events, phases shaded, the activation peak marked");
  app->add_flag("--svg-persistent", f.svg_persistent, "In the --svg picture, also draw parameters, gradients, "
                                                       "optimizer state and data as a base under the activations: "
                                                       "every category, the top of the stack the whole step's peak");
  add_shared(*app, "--plan", f.plan, "trace its schedule and its policy per block");
  app->callback([flags, app]() {
    TraceFlags& f = *flags;
    f.model.apply_threads();
    ModelConfig cfg = f.model.config();
    const int64_t T = f.model.seq(cfg);
    if (f.batch <= 0) throw Error("cli", "--batch must be positive, got " + std::to_string(f.batch), "e.g. --batch 8");
    const int64_t micro = f.micro_batch ? f.micro_batch : f.batch;
    if (micro <= 0 || f.batch % micro != 0)
      throw Error("cli", "--micro-batch " + std::to_string(micro) + " does not divide --batch " + std::to_string(f.batch),
                  "pick a divisor of the batch, e.g. --micro-batch " + std::to_string(f.batch / 2 > 0 ? f.batch / 2 : 1));
    check_sizes(cfg, micro, T, 8.0);
    if (f.svg_persistent && f.svg.empty()) throw Error("cli", "--svg-persistent needs --svg", "add --svg timeline.svg");
    IoPolicy().input(f.plan, "--plan").output(f.svg, "--svg").check();  // before any work (core/io_policy.h)
    std::optional<StepPlan> plan;
    if (!f.plan.empty()) {
      for (const char* flag : {"--recompute", "--recompute-last", "--segment-replay", "--policy"})
        if (app->get_option(flag)->count() > 0)
          throw Error("cli", std::string(flag) + " cannot be combined with --plan", "the plan file gives the schedule");
      plan = read_plan_file(f.plan);
      check_plan_target(*plan, cfg, f.model.given("--attention"), f.batch, micro, T, omp_get_max_threads(), f.plan);
      cfg = plan->cfg;  // its attention kernel
    }
    StrategySpec spec = parse_strategy(plan ? "none" : f.recompute, int(cfg.L), f.recompute_last,
                                       f.segment_replay == "internals");
    const std::string label = plan ? "plan " + f.plan + " (" + plan->summary + ")"
                                   : spec.label() + (f.policy == "none" ? "" : ", policy " + f.policy);
    const auto model = make_model(cfg);
    const std::vector<NamePolicy> policies = plan ? named_block_policies(*model, plan->block_policy)
                                                  : std::vector<NamePolicy>{};
    const NamePolicy policy = model->policy(f.policy);  // throws naming the presets
    // What Trainer::step holds besides the model: the data set (the built-in corpus, what remat
    // train reads without --data), one micro-batch's token buffers and AdamW's moments, so that the
    // step traced is the whole step a budget counts.
    const data::TokenDataset corpus = data::TokenDataset::load("");
    BatchBuffers batch(micro, T);
    std::mt19937 gen(1);
    for (int64_t i = 0; i < micro * T; ++i) {
      batch.inputs()[i] = int32_t(gen() % uint32_t(cfg.V));
      batch.targets()[i] = int32_t(gen() % uint32_t(cfg.V));
    }
    std::vector<Tensor> adam_m, adam_v;
    make_adamw_moments(*model, &adam_m, &adam_v);
    StepOptions so;
    so.schedule = plan ? plan->schedule : make_schedule(spec, int(cfg.L));
    so.block_policy = policy_pointers(policies);
    if (!policy.keeps_all()) so.policy = &policy;
    if (plan) so.block_attention = plan->block_attention;  // a plan's kernel per block, if it mixes them
    // Each sample: the live bytes right after its event, and at the event's highest total (the
    // allocator's peak since the previous sample; peaks then restart). The step's peaks are the
    // highest of these: forward_backward's own restart at each micro-batch.
    Allocator& alloc = Allocator::global();
    size_t peak_activation = 0, peak_total = 0;
    std::vector<TimelineSample> samples;
    const auto sample = [&](const std::string& e, TimelineSample::Phase phase) {
      peak_activation = std::max(peak_activation, alloc.peak_activation());
      peak_total = std::max(peak_total, alloc.peak_total());
      samples.push_back({e, phase, live_now(), alloc.active_at_peak_total()});
      alloc.reset_peak();
    };
    int n = 0;  // sample i is the state after event i, as numbered below; sample 0 the step's start
    const auto event = [&](const std::string& e, std::optional<TimelineSample::Phase> phase) {
      std::printf("%3d  %-52s activations live %10s\n", ++n, e.c_str(), format_bytes(alloc.active_activation()).c_str());
      sample(e, phase ? *phase : phase_of(e, samples.back().phase));
    };
    so.trace = [&](const std::string& e) { event(e, std::nullopt); };
    const int64_t accum = f.batch / micro;
    std::printf("trace of one step: %s, %s %s%s, batch %lld", cfg.describe().c_str(), plan ? "the" : "strategy",
                label.c_str(), !plan && spec.recompute_last ? " (recompute-last)" : "", (long long)f.batch);
    if (accum == 1)
      std::printf(", seq %lld\n", (long long)T);
    else
      std::printf(" = %lld micro-batches of %lld, seq %lld; micro-step 1 of %lld (the others repeat its events)\n",
                  (long long)accum, (long long)micro, (long long)T, (long long)accum);
    alloc.reset_peak();
    sample("start of step", TimelineSample::Phase::Forward);
    StepMeasure m;  // micro-step 1's counters
    const double count = double(f.batch * T);
    forward_backward(*model, batch.micro_batch(), count, step_rng(1, 0, 0), so, &m);
    if (accum > 1) {  // untraced, one sample for them all: the highest of theirs
      StepOptions quiet = so;
      quiet.trace = nullptr;
      TimelineSample rest{"micro-steps 2-" + std::to_string(accum) + " (as micro-step 1)", samples.back().phase, {}, {}};
      size_t highest = 0;
      for (int64_t k = 1; k < accum; ++k) {
        forward_backward(*model, batch.micro_batch(), count, step_rng(1, 0, uint64_t(k)), quiet, nullptr);
        peak_activation = std::max(peak_activation, alloc.peak_activation());
        if (alloc.peak_total() > highest) highest = alloc.peak_total(), rest.high = alloc.active_at_peak_total();
      }
      peak_total = std::max(peak_total, highest);
      rest.live = live_now();
      std::printf("%3d  %-52s activations live %10s\n", ++n, rest.event.c_str(),
                  format_bytes(alloc.active_activation()).c_str());
      samples.push_back(std::move(rest));
      alloc.reset_peak();
    }
    adamw_step(*model, adam_m, adam_v, AdamWSettings{}, grad_norm(*model), 1e-3f, 1);
    event("optimizer step (gradient norm, AdamW)", TimelineSample::Phase::Optimizer);
    const size_t predicted = plan ? plan->activation_peak
                                  : planner::simulate_memory(planner::trace_step(*model, micro, T, so.policy), so.schedule)
                                        .peak_activation;
    StepOptions dry = so;
    dry.trace = nullptr;
    const size_t predicted_step = dry_run_step(cfg, micro, T, accum, dry, corpus.buffer_bytes()).peak_total;
    // How often each block's forward ran (first pass and recomputes), from the schedule.
    std::vector<int> runs(size_t(cfg.L), 0);
    for (const Action& a : so.schedule)
      if (a.kind == Action::Kind::Forward) ++runs[size_t(a.block)];
    const int lo = *std::min_element(runs.begin(), runs.end()), hi = *std::max_element(runs.begin(), runs.end());
    const std::string ran = lo == hi ? "every block ran " + (lo == 1   ? std::string("once")
                                                             : lo == 2 ? std::string("twice")
                                                                       : std::to_string(lo) + " times")
                                     : "blocks ran " + std::to_string(lo) + " to " + std::to_string(hi) + " times (see above)";
    std::printf("block forwards %lld, recomputes %lld, backwards %lld; %s\n", (long long)m.counters.block_forwards,
                (long long)m.counters.block_recomputes, (long long)m.counters.block_backwards, ran.c_str());
    std::printf("peak activation %s measured, %s predicted\n", format_bytes(peak_activation).c_str(),
                format_bytes(predicted).c_str());
    std::printf("whole-step peak %s measured (every category: parameters, gradients, AdamW moments, data, "
                "activations, transients, workspace), %s predicted by dry run\n",
                format_bytes(peak_total).c_str(), format_bytes(predicted_step).c_str());
    if (!f.svg.empty()) {
      TimelineOptions to;
      to.persistent = f.svg_persistent;
      to.title = "Live memory of one step: " + cfg.describe() + ", " + (plan ? "the " : "strategy ") + label +
                 (!plan && spec.recompute_last ? " (recompute-last)" : "") + ", micro-batch " + std::to_string(micro);
      write_file_atomic(f.svg, timeline_svg(samples, to));
      std::printf("wrote %s: %zu events; measured peak activation %zu bytes, whole step %zu bytes\n", f.svg.c_str(),
                  samples.size() - 1, peak_activation, peak_total);
    }
  });
}

}  // namespace remat::cli
