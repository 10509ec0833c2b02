#include "planner/calibrate.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <ctime>

#include "core/error.h"
#include "core/stats.h"

namespace remat {

namespace {
double wall_now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double cpu_now() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Actions the executor runs in its forward phase: the leading first-pass forwards.
size_t forward_phase(const Schedule& s) {
  size_t n = 0;
  while (n < s.size() && s[n].kind == Action::Kind::Forward && !s[n].recompute) ++n;
  return n;
}
}  // namespace

const char* clock_name(StepClock c) { return c == StepClock::Cpu ? "cpu" : "wall"; }

StepClock parse_clock(const std::string& s) {
  if (s == "wall") return StepClock::Wall;
  if (s == "cpu") return StepClock::Cpu;
  throw Error("cli", "unknown clock " + quote_name(s), "use --clock wall or --clock cpu");
}

struct StepTimer::Impl {
  std::unique_ptr<Model> model;
  BatchBuffers batch;
  std::vector<Tensor> m, v;
  int64_t B, T;
  uint64_t seed;
  int64_t steps = 0;
  double (*now)() = wall_now;
  Impl(const ModelConfig& cfg, int64_t B_, int64_t T_, uint64_t seed_)
      : model(make_model(cfg)), batch(B_, T_), B(B_), T(T_), seed(seed_) {}
};

StepTimer::StepTimer(const ModelConfig& cfg, int64_t B, int64_t T, uint64_t seed, StepClock clock)
    : impl_(std::make_unique<Impl>(cfg, B, T, seed)) {
  Impl& s = *impl_;
  s.now = clock == StepClock::Cpu ? cpu_now : wall_now;
  s.model->init(seed);
  make_adamw_moments(*s.model, &s.m, &s.v);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, int32_t(cfg.V - 1));
  for (int64_t i = 0; i < B * T; ++i) {
    s.batch.inputs()[i] = tok(rng);
    s.batch.targets()[i] = tok(rng);
  }
}

StepTimer::~StepTimer() = default;

Model& StepTimer::model() { return *impl_->model; }

StepTimer::Timing StepTimer::step(const StepOptions& so, StepMeasure* measure) {
  Impl& s = *impl_;
  std::vector<double> ev;
  ev.reserve(so.schedule.size() + 4);
  StepOptions o = so;
  auto now = s.now;
  o.trace = [&ev, now](const std::string&) { ev.push_back(now()); };
  const double t0 = now();
  s.model->zero_grad();
  const double t1 = now();
  forward_backward(*s.model, s.batch.micro_batch(), double(s.B * s.T), step_rng(s.seed, uint64_t(s.steps), 0), o,
                   measure);
  const double norm = grad_norm(*s.model);
  ++s.steps;
  // A small learning rate: the weights move as in training, and random tokens never blow them up.
  if (std::isfinite(norm)) adamw_step(*s.model, s.m, s.v, AdamWSettings{1e-4f}, norm, 1e-4f, s.steps);
  const double t2 = now();

  // Events: embedding, the forward phase's actions, head forward, head backward, the backward
  // phase's actions, embedding backward.
  const size_t n = so.schedule.size(), nf = forward_phase(so.schedule);
  REMAT_ASSERT(ev.size() == n + 4, "StepTimer: the step's events do not match its schedule");
  Timing t;
  t.step = t2 - t0;
  t.action.resize(n);
  t.embed_forward = ev[0] - t1;
  for (size_t k = 0; k < nf; ++k) t.action[k] = ev[k + 1] - ev[k];
  t.head_forward = ev[nf + 1] - ev[nf];
  t.head_backward = ev[nf + 2] - ev[nf + 1];
  for (size_t k = nf; k < n; ++k) t.action[k] = ev[k + 3] - ev[k + 2];
  t.embed_backward = ev[n + 3] - ev[n + 2];
  double sum = t.embed_forward + t.head_forward + t.head_backward + t.embed_backward;
  for (double a : t.action) sum += a;
  t.rest = t.step - sum;
  return t;
}

std::vector<StrategySpec> calibration_strategies(int L) {
  // Segments of near-equal length, all replayed; at least one of two blocks or more when L >= 2, so
  // that pass replays (keep nothing, or a block input) are measured.
  const int K = std::max(1, std::min(int(std::ceil(std::sqrt(double(L)) - 1e-9)), L / 2));
  return {parse_strategy("none", L, false), parse_strategy("uniform:" + std::to_string(K), L, true)};
}

planner::Calibration calibrate(const CalibrateOptions& o) {
  if (o.repeats < 1) throw Error("calibrate", "--repeats must be at least 1, got " + std::to_string(o.repeats), "e.g. --repeats 3");
  if (o.warmup < 0) throw Error("calibrate", "--warmup must be >= 0, got " + std::to_string(o.warmup), "e.g. --warmup 1");
  const int64_t T = o.T > 0 ? o.T : o.cfg.T;
  StepTimer timer(o.cfg, o.B, T, o.seed, o.clock);
  const Model& model = timer.model();
  const int L = model.num_layers();

  std::vector<std::string> names = o.policies.empty() ? model.policy_names() : o.policies;
  std::vector<NamePolicy> policies;
  for (const std::string& n : names) {
    if (std::count(names.begin(), names.end(), n) > 1)
      throw Error("calibrate", "policy " + quote_name(n) + " is listed twice", "list each policy once");
    policies.push_back(model.policy(n));  // throws naming the model's policies
  }

  struct Run {
    size_t policy;
    StepOptions so;
  };
  std::vector<Run> runs;
  for (size_t p = 0; p < policies.size(); ++p)
    for (const StrategySpec& spec : calibration_strategies(L)) {
      Run r{p, {}};
      r.so.schedule = make_schedule(spec, L);
      r.so.policy = policies[p].keeps_all() ? nullptr : &policies[p];
      runs.push_back(std::move(r));
    }

  // Samples per term.
  std::vector<double> emb_f, head_f, head_b, emb_b, rest, fwd_pass, rec_pass, freed;
  struct PolicySamples {
    std::vector<double> fwd_store, rec_store, bwd_stored, bwd_replayed;
  };
  std::vector<PolicySamples> ps(policies.size());
  for (int round = 0; round < o.warmup + o.repeats; ++round) {
    for (const Run& r : runs) {  // interleaved: drift reaches every schedule alike
      const StepTimer::Timing t = timer.step(r.so);
      if (round < o.warmup) continue;
      emb_f.push_back(t.embed_forward);
      head_f.push_back(t.head_forward);
      head_b.push_back(t.head_backward);
      emb_b.push_back(t.embed_backward);
      rest.push_back(t.rest);
      PolicySamples& s = ps[r.policy];
      std::vector<char> replayed(size_t(L), 0);
      for (size_t k = 0; k < r.so.schedule.size(); ++k) {
        const Action& a = r.so.schedule[k];
        const double dt = t.action[k];
        if (a.kind == Action::Kind::Forward) {
          if (a.keep == Keep::Internals) {
            (a.recompute ? s.rec_store : s.fwd_store).push_back(dt);
            replayed[size_t(a.block)] = a.recompute;
          } else {
            (a.recompute ? rec_pass : fwd_pass).push_back(dt);
          }
        } else if (a.kind == Action::Kind::Backward) {
          (replayed[size_t(a.block)] ? s.bwd_replayed : s.bwd_stored).push_back(dt);
        } else {
          freed.push_back(dt);
        }
      }
    }
    if (o.progress)
      o.progress("round " + std::to_string(round + 1) + "/" + std::to_string(o.warmup + o.repeats) +
                 (round < o.warmup ? " (warm-up)" : ""));
  }

  planner::Calibration c;
  c.cfg = model.config();
  c.B = o.B;
  c.T = T;
  c.threads = omp_get_max_threads();
  c.repeats = o.repeats;
  c.clock = clock_name(o.clock);
  c.embed_forward = median(emb_f);
  c.head_forward = median(head_f);
  c.head_backward = median(head_b);
  c.embed_backward = median(emb_b);
  c.rest = std::max(0.0, median(rest));
  c.forward_pass = median(fwd_pass);
  // A one-block chain has no pass replay: price it as a first-pass forward that keeps nothing.
  c.recompute_pass = rec_pass.empty() ? c.forward_pass : median(rec_pass);
  c.free_checkpoint = median(freed);
  for (size_t p = 0; p < policies.size(); ++p)
    c.policies.push_back({names[p], median(ps[p].fwd_store), median(ps[p].rec_store), median(ps[p].bwd_stored),
                          median(ps[p].bwd_replayed)});
  return c;
}

}  // namespace remat
