// remat calibrate: measure this machine's per-block costs for the planner's time model
// (planner/calibration.h, planner/calibrate.h) and write them to a small file.
#include "core/process_memory.h"
#include "cli/cmd_calibrate.h"

#include <omp.h>

#include <chrono>
#include <cstdio>

#include "cli/flags.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/io_policy.h"
#include "planner/calibrate.h"

namespace remat::cli {

namespace {
struct CalibrateFlags {
  ModelFlags model;
  int64_t batch = 8;
  std::string out, policies;
  int64_t repeats = 3, warmup = 1, micro_batch = 0;
  uint64_t seed = 1;
  std::string clock = "wall";
  bool quiet = false;
};
}  // namespace

void add_calibrate(CLI::App& root) {
  auto flags = std::make_shared<CalibrateFlags>();
  CLI::App* app = root.add_subcommand("calibrate", "Measure this machine's per-block costs for the planner's time model");
  CalibrateFlags& f = *flags;
  f.model.add_to(*app, kDefaultPreset);
  f.model.add_shape_from(*app);
  add_shared(*app, "--batch", f.batch, "the calibration prices its micro-batch");
  add_shared(*app, "--micro-batch", f.micro_batch, "the sequences per forward the calibration prices");
  add_shared(*app, "--out", f.out, "the calibration (JSON)")->required();
  app->add_option("--policies", f.policies, "Policies to calibrate, comma separated: none and the model's presets "
                                            "(default: all of them)");
  app->add_option("--repeats", f.repeats, "Timed rounds (each term is a median over blocks and rounds)")
      ->capture_default_str();
  app->add_option("--untimed-rounds", f.warmup, "Untimed rounds first")->capture_default_str();
  add_seed_option(*app, f.seed, "initial weights and random tokens");
  add_shared(*app, "--clock", f.clock)->check(CLI::IsMember({"wall", "cpu"}));
  add_shared_switch(*app, "--quiet", f.quiet, "nothing but errors");
  app->callback([flags]() {
    CalibrateFlags& f = *flags;
    f.model.apply_threads();
    const ModelConfig cfg = f.model.config();
    const int64_t T = f.model.seq(cfg);
    if (f.batch <= 0) throw Error("cli", "--batch must be positive, got " + std::to_string(f.batch), "e.g. --batch 8");
    if (f.micro_batch < 0 || (f.micro_batch > 0 && f.batch % f.micro_batch != 0))
      throw Error("cli", "--micro-batch " + std::to_string(f.micro_batch) + " must divide --batch " + std::to_string(f.batch),
                  "e.g. --batch 8 --micro-batch 2");
    const int64_t micro = f.micro_batch > 0 ? f.micro_batch : f.batch;
    if (f.repeats < 1 || f.repeats > 1000)
      throw Error("cli", "--repeats must be 1 to 1000, got " + std::to_string(f.repeats), "e.g. --repeats 3");
    if (f.warmup < 0 || f.warmup > 1000)
      throw Error("cli", "--untimed-rounds must be 0 to 1000, got " + std::to_string(f.warmup), "e.g. --untimed-rounds 1");
    check_sizes(cfg, micro, T, 16.0);
    IoPolicy().output(f.out, "--out").check();  // before any work (core/io_policy.h)
    if (f.warmup == 0 && f.repeats < 3 && !f.quiet)  // the first round pays for page faults and JIT code
      std::fprintf(stderr, "remat: warning: --untimed-rounds 0 --repeats %lld times cold rounds (first-touch page faults, "
                           "oneDNN's kernel generation) with too few rounds for the median to drop them; the "
                           "calibration may rank plans wrongly (use --untimed-rounds 1 or --repeats 3)\n",
                   (long long)f.repeats);
    CalibrateOptions o;
    o.cfg = cfg;
    o.B = micro;
    o.T = T;
    if (!f.policies.empty()) o.policies = split_names(f.policies, "--policies");
    o.repeats = int(f.repeats);
    o.warmup = int(f.warmup);
    o.seed = f.seed;
    o.clock = parse_clock(f.clock);
    if (!f.quiet) o.progress = [](const std::string& s) { std::fprintf(stderr, "calibrate: %s\n", s.c_str()); };
    const auto t0 = std::chrono::steady_clock::now();
    const planner::Calibration c = calibrate(o);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    planner::save_calibration(c, f.out);
    if (f.quiet) return;
    std::printf("remat calibrate: %s, b=%lld, T=%lld, %d threads, %s clock; medians of %d rounds after %lld warm-up, "
                "%.1f s\n",
                cfg.describe().c_str(), (long long)c.B, (long long)c.T, c.threads, c.clock.c_str(), c.repeats,
                (long long)f.warmup, took);
    std::printf("  per step: embedding %.2f + %.2f ms, head %.2f + %.2f ms, rest (optimizer, ...) %.2f ms\n",
                c.embed_forward * 1e3, c.embed_backward * 1e3, c.head_forward * 1e3, c.head_backward * 1e3,
                c.rest * 1e3);
    std::printf("  per block: forward keeping nothing %.2f ms, replay keeping nothing %.2f ms, free %.3f ms\n",
                c.forward_pass * 1e3, c.recompute_pass * 1e3, c.free_checkpoint * 1e3);
    std::printf("  %-12s %12s %12s %12s %12s %14s\n", "policy", "fwd store", "replay store", "bwd stored",
                "bwd replayed", "DRAM premium");
    for (size_t p = 0; p < c.policies.size(); ++p) {
      const auto& q = c.policies[p];
      std::printf("  %-12s %9.2f ms %9.2f ms %9.2f ms %9.2f ms %11.2f ms\n", q.name.c_str(), q.forward_store * 1e3,
                  q.recompute_store * 1e3, q.backward_stored * 1e3, q.backward_replayed * 1e3,
                  planner::store_premium(c, int(p)) * 1e3);
    }
    const int L = int(cfg.L);
    const double none = planner::predict_time(c, make_schedule(parse_strategy("none", L, false), L)).step;
    std::printf("  predicted step: none %.1f ms", none * 1e3);
    for (const char* s : {"block", "sqrt"}) {
      const double t = planner::predict_time(c, make_schedule(parse_strategy(s, L, false), L)).step;
      std::printf(", %s %.1f ms (%.3fx)", s, t * 1e3, t / none);
    }
    std::printf("\nwrote %s\n", f.out.c_str());
    std::printf("%s\n", command_process_line().c_str());
  });
}

}  // namespace remat::cli
