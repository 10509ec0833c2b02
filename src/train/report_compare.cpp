// `remat train --compare-none`: the measured step time of store-everything beside the run's own
// (train/report.h), in fresh trainers on the same batches.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <new>
#include <vector>

#include "core/error.h"
#include "core/stats.h"
#include "train/report.h"

namespace remat {

StepTiming time_against_none(const TrainOptions& run, int timed, int warmup) {
  REMAT_ASSERT(timed >= 1 && warmup >= 0, "time_against_none needs a step to time");
  TrainOptions o = run;  // the run's model, data, batch, seed and memory limit; nothing written
  o.steps = warmup + timed;
  o.save.clear();
  o.save_dir.clear();
  o.save_every = 0;
  o.metrics_out.clear();
  o.resume.clear();     // the model config is already the checkpoint's; step times do not depend on the weights
  o.init_from.clear();  // ... nor on where they came from
  o.eval_every = 0;
  o.sample_tokens = 0;
  o.progress = false;
  o.quiet = true;
  o.profile = nullptr;
  o.on_step = nullptr;
  TrainOptions none = o;
  none.recompute = "none";
  none.policy = "none";
  none.save_only.clear();
  none.save_all_but.clear();
  none.recompute_last = false;
  none.replay_internals = false;
  none.schedule.reset();      // a plan's schedule and policies are the run's, not the baseline's
  none.block_policy.clear();  // (its kernels per block stay: the baseline runs the same attention)
  StepTiming r;
  r.timed = timed;
  auto median_step = [&](const TrainOptions& opt, size_t* peak) {
    Trainer t(opt);
    std::vector<double> dt;
    for (int k = 0; k < warmup + timed; ++k) {
      if (run.stop && run.stop->load() != 0) throw Error("train", "interrupted", "the run itself finished");
      StepMeasure m;
      const auto t0 = std::chrono::steady_clock::now();
      t.step(k, &m);
      const double d = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (k >= warmup) dt.push_back(d);
      if (peak) *peak = std::max(*peak, m.peak_activation);
    }
    return median(dt);
  };
  r.store_all_s = median_step(none, &r.store_all_peak_activation);
  r.run_s = median_step(o, nullptr);
  return r;
}

void compare_against_none(ReportInput& in, const TrainOptions& run, int timed) {
  in.names = Allocator::global().by_name();
  if (!run.quiet) {
    std::fprintf(stderr, "--compare-none: timing %d step(s) (after 1 warm-up) of store-everything and of %s%s%s\n",
                 timed, in.strategy.label().c_str(), in.policy ? " with policy " : "",
                 in.policy ? in.policy_label.c_str() : "");
    std::fflush(stderr);
  }
  try {
    const StepTiming t = time_against_none(run, timed, 1);
    in.store_all_step_s = t.store_all_s;
    in.step_s = t.run_s;
    in.timed_steps = t.timed;
    in.store_all_peak_measured = t.store_all_peak_activation;
  } catch (const Error& e) {
    in.compare_note = e.what();
  } catch (const std::bad_alloc&) {
    in.compare_note = "out of host memory";
  }
}

}  // namespace remat
