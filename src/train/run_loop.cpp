// Trainer::run (trainer.h): the loop of steps, with its metrics lines, progress on stderr, periodic
// validation and checkpoints, and what a finished or stopped run writes.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>

#include "core/allocator.h"
#include "core/error.h"
#include "model/weights.h"
#include "train/metrics_file.h"
#include "train/trainer.h"
#include "train/trainer_impl.h"

namespace remat {

namespace {

// A JSON number, or null (and *nonfinite set) for NaN and infinities, which JSON cannot hold.
std::string json_num(double v, const char* fmt, bool* nonfinite) {
  if (!std::isfinite(v)) {
    *nonfinite = true;
    return "null";
  }
  char b[64];
  std::snprintf(b, sizeof b, fmt, v);
  return b;
}

// 75 -> "1:15", 3725 -> "1:02:05".
std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const long long t = std::llround(seconds);
  char b[48];
  if (t >= 3600)
    std::snprintf(b, sizeof b, "%lld:%02lld:%02lld", t / 3600, t / 60 % 60, t % 60);
  else
    std::snprintf(b, sizeof b, "%lld:%02lld", t / 60, t % 60);
  return b;
}

std::string nonfinite_name(double v) { return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf"); }

}  // namespace

TrainSummary Trainer::run() {
  Impl& s = *impl_;
  const TrainOptions& o = s.opt;
  TrainSummary sum;
  sum.start_step = s.start_step;
  MetricsFile metrics(o.metrics_out, s.start_step);
  sum.first_val = validate();
  sum.val_losses.push_back(sum.first_val);
  const double tokens_per_step = double(o.batch * s.T);
  double tok_s = 0;
  const auto run_start = std::chrono::steady_clock::now();
  auto last_progress = run_start;
  int64_t st = s.start_step;
  // The whole step's prediction (a shape-only dry run, cheap), carried beside every step's measure.
  const StepMemory predicted = predicted_memory();
  std::optional<size_t> untracked;  // heap outside the allocator, once the first step warmed oneDNN
  for (; st < o.steps; ++st) {
    // Under mpirun every rank stops at the same step boundary (a signal may reach one rank first),
    // and only there: between boundaries the ranks see the last agreed value.
    if (s.signal_stop) s.agreed_stop.store(dist::Comm::world().max(s.signal_stop->load()));
    if (o.stop && o.stop->load() != 0) {  // polled between steps only: the step before finished whole
      sum.stopped = true, sum.stop_signal = o.stop ? o.stop->load() : 0;
      break;
    }
    StepMeasure m;
    auto t0 = std::chrono::steady_clock::now();
    float loss = step(st, &m);
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!untracked) untracked = untracked_heap_bytes();
    m.whole_step = predicted;
    m.untracked_heap = untracked;
    tok_s = tokens_per_step / dt;
    sum.losses.push_back(loss);
    sum.measure = m;
    bool nonfinite = false;
    if (!s.last_finite) {
      char line[256];
      std::snprintf(line, sizeof line, "{\"step\": %lld, \"loss\": %s, \"grad_norm\": %s, \"nonfinite\": true%s}",
                    (long long)(st + 1), json_num(loss, "%.6f", &nonfinite).c_str(),
                    json_num(s.last_norm, "%.6g", &nonfinite).c_str(), o.skip_nonfinite ? ", \"skipped\": true" : "");
      metrics.line(line);
      const bool bad_loss = !std::isfinite(loss);
      std::string what = bad_loss ? "loss became " : "gradient norm became ";
      what += nonfinite_name(bad_loss ? double(loss) : s.last_norm);
      if (!o.skip_nonfinite)
        throw Error("train", what + " at step " + std::to_string(st + 1) + "; stopped without writing --save or a checkpoint",
                    "lower --lr, or --skip-nonfinite to skip such steps; --save and the checkpoints keep the last good "
                    "weights");
      ++s.skipped;
      if (!o.quiet)
        std::fprintf(stderr, "step %lld: %s, update skipped (%lld skipped so far)\n", (long long)(st + 1), what.c_str(),
                     (long long)s.skipped);
      if (o.on_step) o.on_step(st, loss);
      if (o.save_every > 0 && (st + 1) % o.save_every == 0) sum.checkpoint = save_checkpoint(st + 1);
      continue;
    }
    std::string val_field;
    bool eval = o.eval_every > 0 && ((st + 1) % o.eval_every == 0 || st + 1 == o.steps) &&
                !(o.stop && o.stop->load() != 0);  // a stop skips the evaluation, not the checkpoint
    float vl = 0;
    if (eval) {
      vl = validate();
      eval = !(o.stop && o.stop->load() != 0);  // cut short by a stop: a partial mean is not recorded
    }
    if (eval) {
      sum.val_losses.push_back(vl);
      sum.last_val = vl;
      val_field = ", \"val_loss\": ";
      val_field += json_num(vl, "%.6f", &nonfinite);
    }
    auto reduce_wait = [&] {  // under data parallelism: the reduction the backward did not hide
      const std::optional<double> w = last_reduce_wait_s();
      const std::optional<Gathers> g = last_gathers();  // ZeRO-3: and the gathers it did not hide
      return (w ? ", \"reduce_wait_s\": " + json_num(*w, "%.6f", &nonfinite) : std::string()) +
             (g ? ", \"gather_wait_s\": " + json_num(g->wait_s, "%.6f", &nonfinite) : std::string());
    };
    char line[512];
    const std::string tps = json_num(tok_s, "%.1f", &nonfinite);
    std::snprintf(line, sizeof line,
                  "{\"step\": %lld, \"loss\": %.6f%s, \"lr\": %.6g, \"grad_norm\": %.6g, \"tokens_per_s\": %s, "
                  "\"peak_activation_bytes\": %zu%s%s}",
                  (long long)(st + 1), loss, val_field.c_str(), lr_at(st), s.last_norm, tps.c_str(),
                  m.peak_activation, reduce_wait().c_str(), nonfinite ? ", \"nonfinite\": true" : "");
    metrics.line(line);
    // Progress on stderr: on a terminal one line rewritten every step; otherwise (a log file, a pipe)
    // a line at each evaluation and at least every progress_every seconds. Both show the elapsed
    // time and an ETA from this run's mean step time (evaluations included).
    const auto now = std::chrono::steady_clock::now();
    const double elapsed = std::chrono::duration<double>(now - run_start).count();
    const int64_t done_here = st + 1 - s.start_step;
    const double eta = elapsed / double(done_here) * double(o.steps - st - 1);
    const bool tty = isatty(2);
    const bool periodic = o.progress && !tty &&
                          std::chrono::duration<double>(now - last_progress).count() >= o.progress_every;
    if (!o.quiet && (!o.progress || !tty) && (eval || periodic)) {
      std::string val_text;
      if (eval) {
        char v[32];
        std::snprintf(v, sizeof v, "  val %.4f", sum.last_val);
        val_text = v;
      }
      std::fprintf(stderr, "step %lld/%lld  loss %.4f%s  %.0f tok/s  activations %s  elapsed %s  ETA %s\n",
                   (long long)(st + 1), (long long)o.steps, loss, val_text.c_str(), tok_s,
                   format_bytes(m.peak_activation).c_str(), format_duration(elapsed).c_str(),
                   format_duration(eta).c_str());
      std::fflush(stderr);
      last_progress = now;
    }
    if (!o.quiet && o.progress && tty) {
      std::string val_text;
      if (eval) val_text.append("  val ").append(std::to_string(sum.last_val));
      std::fprintf(stderr, "\rstep %lld/%lld  loss %.4f%s  %.0f tok/s  act %s  elapsed %s  ETA %s   ",
                   (long long)(st + 1), (long long)o.steps, loss, val_text.c_str(), tok_s,
                   format_bytes(m.peak_activation).c_str(), format_duration(elapsed).c_str(),
                   format_duration(eta).c_str());
      if (eval || st + 1 == o.steps) std::fprintf(stderr, "\n");
    }
    if (o.on_step) o.on_step(st, loss);
    if (o.save_every > 0 && (st + 1) % o.save_every == 0) sum.checkpoint = save_checkpoint(st + 1);
  }
  sum.steps_done = st;
  sum.skipped = s.skipped;
  const bool saved_here = o.save_every > 0 && st > s.start_step && st % o.save_every == 0;
  const auto stopped = [&] { return o.stop && o.stop->load() != 0; };
  if (!stopped()) {
    if (st > s.start_step && sum.val_losses.size() == 1) {
      sum.last_val = validate();
      sum.val_losses.push_back(sum.last_val);
    }
    if (st == s.start_step) sum.last_val = sum.first_val;
  } else {
    sum.stopped = true, sum.stop_signal = o.stop ? o.stop->load() : 0;
    sum.last_val = sum.val_losses.back();
  }
  sum.tokens_per_s = tok_s;
  // What the run must not lose comes first: the checkpoint, then --save, each attempted even when the
  // other failed (a full disk under --save-dir must not cost the weights on another disk), then the
  // sample, which a signal may cut short.
  std::exception_ptr failed;
  whole_parameters();  // every rank, before the ones that write or sample read the model
  if (!o.save_dir.empty() && !saved_here) {
    try {
      sum.checkpoint = save_checkpoint(st);
    } catch (...) {
      failed = std::current_exception();
    }
  }
  if (!o.save.empty()) {
    try {
      save_weights(*s.model, o.save, kDefaultShardBytes, o.save_dtype);
      sum.saved = true;
    } catch (...) {
      if (!failed) failed = std::current_exception();
    }
  }
  if (failed) std::rethrow_exception(failed);
  if (!stopped() && o.sample_tokens > 0) sum.sample = sample(o.sample_tokens, o.seed);
  if (stopped()) sum.stopped = true, sum.stop_signal = o.stop ? o.stop->load() : 0;
  metrics.check();
  return sum;
}

}  // namespace remat
