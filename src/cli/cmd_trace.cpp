// remat trace: the event order of one training step (spec self-test (c)), with live activation bytes;
// with --svg, the same step as a picture of live bytes per category (viz/svg.h).
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
#include "viz/svg.h"

namespace remat::cli {

namespace {
struct TraceFlags {
  ModelFlags model;
  std::string recompute = "block";
  bool recompute_last = false;
  std::string segment_replay = "boundaries";
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
  app->add_option("--recompute", f.recompute, "Strategy: none | all | block | sqrt | uniform:K | segments:a,b,...")
      ->capture_default_str();
  app->add_flag("--recompute-last", f.recompute_last, "Also recompute the last segment (the textbook count)");
  app->add_option("--segment-replay", f.segment_replay, "How a checkpointed segment is replayed: boundaries (keep block inputs, then each block's internals just before its backward: least memory) or internals (keep every block's internals in the one replay: least compute)")
      ->check(CLI::IsMember({"boundaries", "internals"}))->capture_default_str();
  app->add_option("--batch", f.batch, "B: sequences per optimizer step, as in remat train")->capture_default_str();
  app->add_option("--micro-batch", f.micro_batch, "b: sequences per forward (default: b = B); one micro-step is "
                                                   "traced, the other B/b - 1 repeat its events");
  app->add_option("--svg", f.svg, "Also draw the step as an SVG picture: live bytes per category over its events, "
                                  "phases shaded, the activation peak marked (written atomically)");
  app->add_flag("--svg-persistent", f.svg_persistent, "In the --svg picture, also draw parameters, gradients, "
                                                       "optimizer state and data as a flat base under the activations");
  app->add_option("--plan", f.plan, "Trace the plan in this file (remat plan ... --budget SIZE --out FILE): its "
                                    "schedule and its policy per block, for the model, batch and seq it was made for");
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
      for (const char* flag : {"--recompute", "--recompute-last", "--segment-replay"})
        if (app->get_option(flag)->count() > 0)
          throw Error("cli", std::string(flag) + " cannot be combined with --plan", "the plan file gives the schedule");
      plan = read_plan_file(f.plan);
      check_plan_target(*plan, cfg, f.model.given("--attention"), f.batch, micro, T, omp_get_max_threads(), f.plan);
      cfg = plan->cfg;  // its attention kernel
    }
    StrategySpec spec = parse_strategy(plan ? "none" : f.recompute, int(cfg.L), f.recompute_last,
                                       f.segment_replay == "internals");
    const std::string label = plan ? "plan " + f.plan + " (" + plan->summary + ")" : spec.label();
    const auto model = make_model(cfg);
    const std::vector<NamePolicy> policies = plan ? named_block_policies(*model, plan->block_policy)
                                                  : std::vector<NamePolicy>{};
    std::vector<int32_t> in(size_t(micro * T)), tg(in.size());
    std::mt19937 gen(1);
    for (auto& t : in) t = int32_t(gen() % uint32_t(cfg.V));
    for (auto& t : tg) t = int32_t(gen() % uint32_t(cfg.V));
    StepOptions so;
    so.schedule = plan ? plan->schedule : make_schedule(spec, int(cfg.L));
    so.block_policy = policy_pointers(policies);
    if (plan) so.block_attention = plan->block_attention;  // a plan's kernel per block, if it mixes them
    int n = 0;
    // Sample 0 is the step's start; sample i is the state after event i, as numbered below.
    std::vector<TimelineSample> samples;
    so.trace = [&](const std::string& e) {
      std::printf("%3d  %-52s activations live %10s\n", ++n, e.c_str(),
                  format_bytes(Allocator::global().active_activation()).c_str());
      if (!f.svg.empty())
        samples.push_back({e, phase_of(e, samples.back().phase), live_now()});
    };
    std::printf("trace of one step: %s, %s %s%s, batch %lld", cfg.describe().c_str(), plan ? "the" : "strategy",
                label.c_str(), !plan && spec.recompute_last ? " (recompute-last)" : "", (long long)f.batch);
    if (micro == f.batch)
      std::printf(", seq %lld\n", (long long)T);
    else
      std::printf(" = %lld micro-batches of %lld, seq %lld; micro-step 1 of %lld (the others repeat its events)\n",
                  (long long)(f.batch / micro), (long long)micro, (long long)T, (long long)(f.batch / micro));
    StepMeasure m;
    if (!f.svg.empty()) samples.push_back({"start of step", TimelineSample::Phase::Forward, live_now()});
    forward_backward(*model, MicroBatch{in, tg, micro, T}, double(f.batch * T), step_rng(1, 0, 0), so, &m);
    const size_t predicted = plan ? plan->activation_peak
                                  : planner::simulate_memory(planner::trace_step(*model, micro, T), so.schedule).peak_activation;
    // How often each block's forward ran (first pass and recomputes), from the schedule.
    std::vector<int> runs(size_t(cfg.L), 0);
    for (const Action& a : so.schedule)
      if (a.kind == Action::Kind::Forward) ++runs[size_t(a.block)];
    const int lo = *std::min_element(runs.begin(), runs.end()), hi = *std::max_element(runs.begin(), runs.end());
    const std::string ran = lo == hi ? "every block ran " + (lo == 1   ? std::string("once")
                                                             : lo == 2 ? std::string("twice")
                                                                       : std::to_string(lo) + " times")
                                     : "blocks ran " + std::to_string(lo) + " to " + std::to_string(hi) + " times (see above)";
    std::printf("block forwards %lld, recomputes %lld, backwards %lld; %s\n",
                (long long)m.counters.block_forwards, (long long)m.counters.block_recomputes,
                (long long)m.counters.block_backwards, ran.c_str());
    std::printf("peak activation %s measured, %s predicted\n", format_bytes(m.peak_activation).c_str(),
                format_bytes(predicted).c_str());
    if (!f.svg.empty()) {
      TimelineOptions to;
      to.persistent = f.svg_persistent;
      to.title = "Live memory of one step: " + cfg.describe() + ", " + (plan ? "the " : "strategy ") + label +
                 (!plan && spec.recompute_last ? " (recompute-last)" : "") + ", micro-batch " + std::to_string(micro);
      write_file_atomic(f.svg, timeline_svg(samples, to));
      std::printf("wrote %s: %zu events; measured peak activation %zu bytes\n", f.svg.c_str(), samples.size() - 1,
                  m.peak_activation);
    }
  });
}

}  // namespace remat::cli
