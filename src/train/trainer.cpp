#include "train/trainer.h"

#include <omp.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <random>
#include <tuple>
#include <unistd.h>

#include "core/atomic_file.h"
#include "core/error.h"
#include "data/dataset.h"
#include "kernels/adamw.h"
#include "model/sample.h"
#include "model/weights.h"
#include "planner/planner.h"
#include "core/record.h"
#include "train/metrics_file.h"
#include "train/run_data.h"
#include "train/run_state.h"
#include "train/save_dir.h"
#include "core/signal_point.h"

namespace remat {

struct Trainer::Impl {
  TrainOptions opt;
  std::unique_ptr<Model> model;
  data::TokenDataset train_data, val_data;
  std::unique_ptr<data::BatchSampler> sampler, val_sampler;
  std::vector<Tensor> m, v;  // AdamW state
  StrategySpec strategy;
  NamePolicy policy;
  Schedule schedule;
  int64_t micro = 0, T = 0, accum = 1;
  std::vector<NamePolicy> block_policies;  // a plan's, one per block (TrainOptions::block_policy)
  std::unique_ptr<BatchBuffers> batch;     // one micro-batch's inputs and targets
  size_t data_bytes = 0;                   // the data sets' accounted bytes (dry_run_step's data_bytes)
  std::string data_description;
  int64_t start_step = 0, skipped = 0;
  double last_norm = 0;
  bool last_finite = true;
  CheckpointIdentity identity;        // the run's id and data, recorded in every checkpoint
  std::unique_ptr<SaveDir> save_dir;  // the locked --save-dir, when given

  explicit Impl(const TrainOptions& o) : opt(o), model(make_model(o.model)) {}
};

namespace {
std::string fmt_g(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

}  // namespace

Trainer::Trainer(const TrainOptions& o) {
  o.model.validate();
  if (o.steps < 0) throw Error("train", "--steps must be >= 0", "e.g. --steps 200");
  if (o.batch <= 0) throw Error("train", "--batch must be positive, got " + std::to_string(o.batch), "e.g. --batch 8");
  const int64_t micro = o.micro_batch == 0 ? o.batch : o.micro_batch;
  if (micro <= 0 || o.batch % micro != 0)
    throw Error("train", "--micro-batch " + std::to_string(micro) + " does not divide --batch " + std::to_string(o.batch),
                "pick a divisor of the batch, e.g. --micro-batch " + std::to_string(o.batch / 2 > 0 ? o.batch / 2 : 1));
  const int64_t T = o.seq == 0 ? o.model.T : o.seq;
  if (T <= 0) throw Error("train", "--seq must be positive, got " + std::to_string(T), "e.g. --seq 128");
  if (T > o.model.T)
    throw Error("train", "--seq " + std::to_string(T) + " is above the model's block size " + std::to_string(o.model.T),
                "use --seq <= " + std::to_string(o.model.T) + ", or a model with a larger block size");
  if (!(o.lr > 0) || !std::isfinite(o.lr)) throw Error("train", "--lr must be a positive number", "e.g. --lr 1e-3");
  auto non_negative = [](double v, const char* flag, const char* example) {
    if (!(v >= 0) || !std::isfinite(v))
      throw Error("train", std::string(flag) + " must be >= 0, got " + fmt_g(v), std::string("e.g. ") + example);
  };
  auto whole = [](int64_t v, const char* flag, const char* example) {  // echoed as typed, not as a float
    if (v < 0)
      throw Error("train", std::string(flag) + " must be >= 0, got " + std::to_string(v), std::string("e.g. ") + example);
  };
  whole(o.warmup, "--warmup", "--warmup 20");
  whole(o.lr_decay_steps, "--lr-decay-steps", "--lr-decay-steps 5000 (0: the run's --steps)");
  non_negative(o.clip, "--clip", "--clip 1.0 (0 turns clipping off)");
  non_negative(o.weight_decay, "--weight-decay", "--weight-decay 0.1");
  whole(o.sample_tokens, "--sample-tokens", "--sample-tokens 200");
  whole(o.eval_every, "--eval-every", "--eval-every 50 (0: only at the end)");
  if (!(o.val_fraction > 0.0 && o.val_fraction < 1.0))
    throw Error("train", "--val-fraction must be between 0 and 1 (exclusive), got " + fmt_g(o.val_fraction),
                "e.g. --val-fraction 0.1 for a 90/10 split, or --val-data FILE");
  if (!(o.progress_every >= 0) || !std::isfinite(o.progress_every))
    throw Error("train", "--progress-every must be >= 0 seconds", "e.g. --progress-every 10 (0: every step)");
  if (o.eval_batches <= 0)
    throw Error("train", "--eval-batches must be positive, got " + std::to_string(o.eval_batches), "e.g. --eval-batches 8");
  if (o.save_every < 0)
    throw Error("train", "--save-every must be >= 0, got " + std::to_string(o.save_every), "e.g. --save-every 100");
  if (o.save_every > 0 && o.save_dir.empty())
    throw Error("train", "--save-every needs --save-dir", "e.g. --save-dir runs/a --save-every 100");
  if (o.keep < 1)
    throw Error("train", "--keep must be at least 1, got " + std::to_string(o.keep), "e.g. --keep 2");
  if (!o.resume.empty() && !o.init_from.empty())
    throw Error("train", "--resume and --init-from cannot be combined",
                "--resume continues a run with its weights and optimizer state; --init-from starts a new one");
  impl_ = std::make_unique<Impl>(o);
  Impl& s = *impl_;
  std::string strategy_text;
  NamePolicy policy = policy_from(o, *s.model, &strategy_text);
  // A plan's schedule is the step's; the strategy then names it (a textbook name when it is one).
  StrategySpec spec;
  if (o.schedule) {
    validate_schedule(*o.schedule, int(o.model.L));
    if (const std::optional<StrategySpec> named = named_strategy(*o.schedule, int(o.model.L))) {
      spec = *named;
    } else {
      spec.name = "actions";
      spec.actions = *o.schedule;
    }
  } else {
    spec = parse_strategy(strategy_text, int(o.model.L), o.recompute_last, o.replay_internals);
  }
  Allocator::global().set_limit(o.memory_limit);

  s.micro = micro;
  s.T = T;
  s.accum = o.batch / micro;
  s.strategy = spec;
  s.policy = policy;
  s.schedule = o.schedule ? *o.schedule : make_schedule(spec, int(o.model.L));
  if (!o.block_policy.empty()) {
    if (o.block_policy.size() != size_t(o.model.L))
      throw Error("plan", "the plan names " + std::to_string(o.block_policy.size()) + " block policies for " +
                              std::to_string(o.model.L) + " blocks",
                  "make the plan for this model (one policy per block)");
    s.block_policies = named_block_policies(*s.model, o.block_policy);
  }
  if (!o.block_attention.empty() && o.block_attention.size() != size_t(o.model.L))
    throw Error("plan", "the plan names " + std::to_string(o.block_attention.size()) + " attention kernels for " +
                            std::to_string(o.model.L) + " blocks",
                "make the plan for this model (one kernel per block)");
  s.model->init(o.seed);
  if (!o.init_from.empty()) load_weights(*s.model, o.init_from);
  if (!o.resume.empty() && !o.data.empty() && o.random_tokens == 0 && !std::filesystem::exists(o.data))
    throw Error("checkpoint", "the data the checkpoint trained on, " + quote_name(o.data) + ", is gone",
                "give --data with the file's new path; its content is checked against the checkpoint's record");
  auto [tr, va] = load_split(o, T);
  if (o.val_data.empty() || o.random_tokens > 0) {
    std::string n = std::to_string(va.size());
    for (size_t k = n.size(); k > 3; k -= 3) n.insert(k - 3, ",");
    s.data_description = tr.description() + "; validation: its last " + fmt_g(100.0 * o.val_fraction) + "% (" + n +
                         " tokens, --val-fraction " + fmt_g(o.val_fraction) + ")";
  } else {
    s.data_description = tr.description() + ", all of it trains; validation: --val-data " + va.description();
  }
  s.train_data = std::move(tr);
  s.val_data = std::move(va);
  s.sampler = std::make_unique<data::BatchSampler>(s.train_data, micro, T, o.seed);
  s.val_sampler = std::make_unique<data::BatchSampler>(s.val_data, micro, T, o.seed + 1);
  // Split parts share their parent's buffer; --val-data is a buffer of its own (0 bytes when mapped).
  s.data_bytes = s.train_data.buffer_bytes() +
                 (o.val_data.empty() || o.random_tokens > 0 ? 0 : s.val_data.buffer_bytes());
  make_adamw_moments(*s.model, &s.m, &s.v);
  s.batch = std::make_unique<BatchBuffers>(micro, T);
  std::optional<RunState> resumed;
  if (!o.resume.empty()) resumed = read_run_state(find_checkpoint(o.resume));
  const bool legacy = resumed && resumed->version < 3;
  s.identity.run = resumed && !legacy ? resumed->identity.run : new_run_id();
  if (!o.save_dir.empty() || resumed) {  // the data's fingerprint: one pass over its tokens
    s.identity.train_data = s.train_data.fingerprint();
    s.identity.val_data = s.val_data.fingerprint();
  }
  if (resumed) {
    // Weights, moments and the step are the whole state: batches (BatchSampler::sample(step * accum
    // + k)) and dropout masks (step_rng(seed, step, k)) are pure functions of (seed, step), and
    // AdamW's bias correction takes the absolute step, so restoring the step restores the data
    // position and every RNG stream. The continuation is bit-identical to an uninterrupted run.
    const RunState& st = *resumed;
    ModelConfig saved = st.options.model;
    for (const std::string& f : st.unrecorded)  // a version 1 checkpoint: these are the options' to say
      if (f == "model.precision") saved.precision = o.model.precision;
      else if (f == "model.fp32_residual") saved.fp32_residual = o.model.fp32_residual;
    if (const auto d = record::diff(saved, o.model); !d.empty())
      throw Error("checkpoint", "the checkpoint '" + st.dir + "' holds another model: " +
                                    record::describe(d, "checkpoint", "options"),
                  "resume with the checkpoint's model config");
    if (st.step > o.steps)
      throw Error("train", "--steps " + std::to_string(o.steps) + " is below the checkpoint's step " +
                               std::to_string(st.step) + " ('" + st.dir + "')",
                  "give --steps " + std::to_string(st.step) + " or more to continue");
    // The data by content, not by path: a moved or copied file resumes, a changed one does not.
    if (!legacy)
      for (const auto& [have, want, what] :
           {std::tuple{s.identity.train_data, st.identity.train_data, "training"},
            {s.identity.val_data, st.identity.val_data, "validation"}})
        if (have != want)
          throw Error("checkpoint", std::string("the ") + what + " data is not what the checkpoint " +
                                        quote_name(st.dir) + " trained on: its tokens are " + have.describe() +
                                        ", the checkpoint recorded " + want.describe(),
                      "resume with the data the run trained on (--data FILE may name it where it is now), or start "
                      "a new run");
    load_checkpoint_tensors(st, *s.model, s.m, s.v);
    s.start_step = st.step;
    s.skipped = st.skipped;
  }
  if (!o.save_dir.empty())
    s.save_dir = std::make_unique<SaveDir>(o.save_dir, s.identity.run, resumed ? resumed->step : -1, legacy);
}

int64_t Trainer::start_step() const { return impl_->start_step; }
double Trainer::last_grad_norm() const { return impl_->last_norm; }
bool Trainer::last_step_finite() const { return impl_->last_finite; }

std::string Trainer::save_checkpoint(int64_t step) {
  Impl& s = *impl_;
  REMAT_ASSERT(s.save_dir, "save_checkpoint without a --save-dir");
  // A second SIGINT while the checkpoint is written waits for it (cmd_train): no half-written folder.
  if (s.opt.saving) s.opt.saving->fetch_add(1);
  struct Done {
    std::atomic<int>* f;
    ~Done() {
      if (f) f->fetch_sub(1);
    }
  } done{s.opt.saving};
  const std::string dir = ::remat::save_checkpoint(*s.save_dir, step, s.skipped, *s.model, s.m, s.v, s.opt, s.identity);
  s.save_dir->prune(s.opt.keep);
  return dir;
}

Trainer::~Trainer() = default;
Model& Trainer::model() { return *impl_->model; }
const Model& Trainer::model() const { return *impl_->model; }
int64_t Trainer::micro_batch() const { return impl_->micro; }
int64_t Trainer::seq() const { return impl_->T; }
int64_t Trainer::accum() const { return impl_->accum; }
const std::vector<NamePolicy>& Trainer::block_policies() const { return impl_->block_policies; }
const StrategySpec& Trainer::strategy() const { return impl_->strategy; }
const std::string& Trainer::data_description() const { return impl_->data_description; }
const NamePolicy& Trainer::policy() const { return impl_->policy; }

namespace {
// --save-only / --save-all-but: every name (a name within a block, a full name or a glob of either)
// must select a tensor that some block saves, as the dry run of this model finds them; a name that
// selects nothing would silently change nothing.
NamePolicy checked_named_policy(const Model& model, NamePolicy::Mode mode, const std::string& text,
                                const std::string& flag) {
  const std::vector<std::string> names = split_names(text, flag);
  NamePolicy policy = model.named_policy(mode, names, (mode == NamePolicy::Mode::SaveOnly ? "save-only:" : "save-all-but:") + text);
  const auto dry = planner::shape_only_model(model.config());
  const planner::StepTrace tr = planner::trace_step(*dry, 1, std::min<int64_t>(2, model.config().T));
  std::vector<std::string> full, local;  // the block tensors, and their names within a block
  for (const auto& b : tr.blocks)
    for (const auto& t : b.kept) {
      const auto split = dry->split_name(t.name);
      if (!split) continue;  // a block's input from the embedding: not a block tensor
      full.push_back(t.name);
      if (std::find(local.begin(), local.end(), split->second) == local.end()) local.push_back(split->second);
    }
  for (const std::string& n : names) {
    bool hit = false;
    for (const std::string& t : full) hit = hit || policy.matches(n, t);
    if (hit) continue;
    std::string list;
    for (const std::string& l : local) list += (list.empty() ? "" : ", ") + l;
    throw Error("policy",
                flag + " '" + n + "' names no tensor a block of " + model.config().describe() + " saves" +
                    (model.config().attention == autograd::AttentionKind::Flash ? " (with flash attention)" : ""),
                "names within a block are " + list + " (a full name such as " + (full.empty() ? "" : full.front()) +
                    " or a glob works too)");
  }
  return policy;
}
}  // namespace

NamePolicy policy_from(const TrainOptions& o, const Model& model, std::string* strategy) {
  *strategy = o.recompute;
  int asked = int(!o.save_only.empty()) + int(!o.save_all_but.empty()) + int(o.policy != "none");
  if (model.has_policy(o.recompute) && o.recompute != "none") {
    asked += 1;
    *strategy = "none";
  }
  if (asked > 1)
    throw Error("policy", "more than one policy given (--policy, --save-only, --save-all-but or a policy as --recompute)",
                "combine a strategy with one policy, e.g. --recompute block --policy selective");
  if (!o.save_only.empty())
    return checked_named_policy(model, NamePolicy::Mode::SaveOnly, o.save_only, "--save-only");
  if (!o.save_all_but.empty())
    return checked_named_policy(model, NamePolicy::Mode::SaveAllBut, o.save_all_but, "--save-all-but");
  if (*strategy != o.recompute) return model.policy(o.recompute);
  return model.policy(o.policy);
}

double Trainer::lr_at(int64_t step) const { return impl_->opt.lr_at(step); }

StepOptions Trainer::step_options() const {
  const Impl& s = *impl_;
  StepOptions so;
  so.schedule = s.schedule;
  so.policy = s.policy.keeps_all() ? nullptr : &s.policy;
  so.block_policy = policy_pointers(s.block_policies);
  so.block_attention = s.opt.block_attention;
  so.check_determinism = s.opt.check_determinism;
  so.break_replay = s.opt.break_replay;
  so.profile = s.opt.profile;
  return so;
}

StepMemory Trainer::predicted_memory() const {
  const Impl& s = *impl_;
  StepOptions so = step_options();
  so.profile = nullptr;
  return dry_run_step(s.opt.model, s.micro, s.T, s.accum, so, s.data_bytes);
}

float Trainer::step(int64_t step, StepMeasure* measure) {
  Impl& s = *impl_;
  const TrainOptions& o = s.opt;
  signal_point("step");
  s.model->zero_grad();
  const StepOptions so = step_options();
  double loss = 0;
  const double count = double(s.micro * s.T * s.accum);
  for (int64_t k = 0; k < s.accum; ++k) {
    s.sampler->sample(uint64_t(step * s.accum + k), s.batch->inputs(), s.batch->targets());
    loss += forward_backward(*s.model, s.batch->micro_batch(), count, step_rng(o.seed, uint64_t(step), uint64_t(k)),
                             so, measure);
  }
  // The global gradient norm (every step: a non-finite one stops or skips the step), then clipping
  // and AdamW.
  const auto t_opt = std::chrono::steady_clock::now();
  const double norm = grad_norm(*s.model);
  s.last_norm = norm;
  s.last_finite = std::isfinite(loss) && std::isfinite(norm);
  if (s.last_finite) {
    const AdamWSettings aw{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.clip};
    adamw_step(*s.model, s.m, s.v, aw, norm, float(lr_at(step)), step + 1);
  }  // else weights and moments untouched
  if (measure) {  // the optimizer's part, with the last micro-batch's (the peaks since its reset)
    StepMeasure opt_part;
    opt_part.take_peaks(Allocator::global());
    measure->merge(opt_part);
  }
  if (!s.last_finite) return float(loss / double(s.accum));
  if (o.profile) {
    auto& e = o.profile->ops["optimizer [clip+adamw]"];
    e.fwd_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t_opt).count();
    ++e.calls;
  }
  return float(loss / double(s.accum));
}

float Trainer::validate() {
  Impl& s = *impl_;
  double sum = 0;
  int64_t k = 0;
  for (; k < s.opt.eval_batches; ++k) {
    signal_point("validation");
    if (s.opt.stop && s.opt.stop->load() != 0) break;  // a stop ends the evaluation: the mean so far
    s.val_sampler->sequential(uint64_t(k), s.batch->inputs(), s.batch->targets());
    sum += evaluate_loss(*s.model, s.batch->micro_batch());
  }
  if (k < s.opt.eval_batches) return std::numeric_limits<float>::quiet_NaN();  // cut short: no mean
  return float(sum / double(k));
}

std::string Trainer::sample(int64_t tokens, uint64_t seed) {
  // Temperature 1 over the whole vocabulary, from a newline (token 0 for a vocabulary without one).
  const Model& model = *impl_->model;
  SampleOptions so;
  so.tokens = tokens;
  so.seed = seed;
  so.stop = impl_->opt.stop;
  const std::vector<int32_t> prompt{model.config().V > '\n' ? int32_t('\n') : 0};
  const std::vector<int32_t> out = generate(model, prompt, so);
  // A byte-level model prints text, whatever its training data was (a token file too).
  if (byte_level(model.config())) return bytes_text(out);
  std::string ids;  // token ids: remat has no tokenizer for non-byte vocabularies
  for (size_t i = 0; i < out.size(); ++i) ids.append(i > 0 ? " " : "").append(std::to_string(out[i]));
  return std::string("(token ids) ").append(ids);
}

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
    if (o.stop && o.stop->load() != 0) {  // polled between steps only: the step before finished whole
      sum.stopped = true;
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
    char line[512];
    const std::string tps = json_num(tok_s, "%.1f", &nonfinite);
    std::snprintf(line, sizeof line,
                  "{\"step\": %lld, \"loss\": %.6f%s, \"lr\": %.6g, \"grad_norm\": %.6g, \"tokens_per_s\": %s, "
                  "\"peak_activation_bytes\": %zu%s}",
                  (long long)(st + 1), loss, val_field.c_str(), lr_at(st), s.last_norm, tps.c_str(),
                  m.peak_activation, nonfinite ? ", \"nonfinite\": true" : "");
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
    sum.stopped = true;
    sum.last_val = sum.val_losses.back();
  }
  sum.tokens_per_s = tok_s;
  // What the run must not lose comes first: the checkpoint, then --save, each attempted even when the
  // other failed (a full disk under --save-dir must not cost the weights on another disk), then the
  // sample, which a signal may cut short.
  std::exception_ptr failed;
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
  if (stopped()) sum.stopped = true;
  metrics.check();
  return sum;
}

}  // namespace remat
