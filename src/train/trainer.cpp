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

#include "core/atomic_file.h"
#include "core/error.h"
#include "data/dataset.h"
#include "kernels/adamw.h"
#include "model/sample.h"
#include "model/weights.h"
#include "planner/planner.h"
#include "core/record.h"
#include "core/text.h"
#include "train/run_data.h"
#include "train/run_state.h"
#include "train/save_dir.h"
#include "train/trainer_impl.h"
#include "core/signal_point.h"
#include "core/threads.h"

namespace remat {

namespace {
dist::Parallelism parallelism_of(const TrainOptions& o, int64_t rank_accum) {
  dist::Parallelism p{int(o.ranks), int(o.zero), rank_accum, o.overlap_reduction};
  p.hold = o.hold_gathers;
  return p;
}
}  // namespace


Trainer::Trainer(const TrainOptions& o) {
  const auto [micro, T] = check_train_options(o);
  const dist::Comm& world = dist::Comm::world();
  impl_ = std::make_unique<Impl>(o);
  Impl& s = *impl_;
  if (world.size() > 1 && o.stop) {
    s.signal_stop = o.stop;
    s.opt.stop = &s.agreed_stop;
  }
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
  if (!tok::is_bytes(o.tokenizer)) s.tokenizer = tok::load_tokenizer(o.tokenizer);
  auto [tr, va] = load_split(o, T, s.tokenizer.get());
  if (o.val_data.empty() || o.random_tokens > 0) {
    std::string n = std::to_string(va.size());
    for (size_t k = n.size(); k > 3; k -= 3) n.insert(k - 3, ",");
    s.data_description = tr.description() + "; validation: its last " + short_number(100.0 * o.val_fraction) + "% (" + n +
                         " tokens, --val-fraction " + short_number(o.val_fraction) + ")";
  } else {
    s.data_description = tr.description() + ", all of it trains; validation: --val-data " + va.description();
  }
  s.train_data = std::move(tr);
  s.val_data = std::move(va);
  // The data's fingerprints (one pass over its tokens each): the ranks compare them, a save records them.
  std::optional<std::pair<Fingerprint, Fingerprint>> data_fp;
  if (world.size() > 1 || !o.save_dir.empty() || !o.resume.empty())
    data_fp.emplace(s.train_data.fingerprint(), s.val_data.fingerprint());
  if (world.size() > 1) check_ranks_agree(o, data_fp->first, data_fp->second);
  s.sampler = std::make_unique<data::BatchSampler>(s.train_data, micro, T, o.seed);
  s.val_sampler = std::make_unique<data::BatchSampler>(s.val_data, micro, T, o.seed + 1);
  // Split parts share their parent's buffer; --val-data is a buffer of its own (0 bytes when mapped);
  // the tokenizer's tables are data too.
  s.data_bytes = s.train_data.buffer_bytes() +
                 (o.val_data.empty() || o.random_tokens > 0 ? 0 : s.val_data.buffer_bytes()) +
                 (s.tokenizer ? s.tokenizer->table_bytes() : 0);
  s.rank_accum = s.accum / o.ranks;
  if (o.ranks > 1) s.dp = std::make_unique<dist::DataParallel>(*s.model, world, parallelism_of(o, s.rank_accum));
  const Shard shard = s.dp ? s.dp->shard() : Shard{};
  make_adamw_moments(*s.model, &s.m, &s.v, shard);
  s.batch = std::make_unique<BatchBuffers>(micro, T);
  std::optional<RunState> resumed;
  if (!o.resume.empty()) resumed = read_run_state(find_checkpoint(o.resume));
  const bool legacy = resumed && resumed->version < 3;
  s.identity.run = resumed && !legacy ? resumed->identity.run : new_run_id();
  if (!o.save_dir.empty() || resumed) {
    s.identity.train_data = data_fp->first;
    s.identity.val_data = data_fp->second;
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
    if (shard.whole()) {
      load_checkpoint_tensors(st, *s.model, s.m, s.v);
    } else {  // ZeRO-1: the checkpoint holds the whole moments; this rank keeps its chunk
      std::vector<Tensor> m, v;
      make_adamw_moments(*s.model, &m, &v);
      load_checkpoint_tensors(st, *s.model, m, v);
      dist::DataParallel::cut_moments(m, shard, &s.m);
      dist::DataParallel::cut_moments(v, shard, &s.v);
    }
    s.start_step = st.step;
    s.skipped = st.skipped;
  }
  if (!o.save_dir.empty() && world.rank() == 0)
    s.save_dir = std::make_unique<SaveDir>(o.save_dir, s.identity.run, resumed ? resumed->step : -1, legacy);
}

int64_t Trainer::start_step() const { return impl_->start_step; }
double Trainer::last_grad_norm() const { return impl_->last_norm; }
std::optional<double> Trainer::last_reduce_wait_s() const {
  return impl_->dp ? std::optional<double>(impl_->dp->last_wait_s()) : std::nullopt;
}
std::optional<Trainer::Gathers> Trainer::last_gathers() const {
  if (!impl_->dp || impl_->opt.zero != 3 || impl_->dp->local_ranks() != 1) return std::nullopt;
  return Gathers{impl_->dp->last_gathers(), impl_->dp->last_gathered_bytes(), impl_->dp->last_gather_wait_s()};
}
bool Trainer::last_step_finite() const { return impl_->last_finite; }

std::string Trainer::save_checkpoint(int64_t step) {
  Impl& s = *impl_;
  whole_parameters();
  std::vector<Tensor> full_m, full_v;  // ZeRO-1: the moments gathered onto rank 0
  const bool sharded = s.dp && !s.dp->shard().whole();
  if (sharded) {
    s.dp->gather_moments(s.m, &full_m);
    s.dp->gather_moments(s.v, &full_v);
  }
  if (dist::Comm::world().rank() != 0) return "";  // rank 0 writes
  REMAT_ASSERT(s.save_dir, "save_checkpoint without a --save-dir");
  // A second SIGINT while the checkpoint is written waits for it (cmd_train): no half-written folder.
  if (s.opt.saving) s.opt.saving->fetch_add(1);
  struct Done {
    std::atomic<int>* f;
    ~Done() {
      if (f) f->fetch_sub(1);
    }
  } done{s.opt.saving};
  const std::string dir = ::remat::save_checkpoint(*s.save_dir, step, s.skipped, *s.model, sharded ? full_m : s.m,
                                                   sharded ? full_v : s.v, s.opt, s.identity);
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
  if (s.dp) so.optimizer_shard = s.dp->shard();
  return so;
}

StepMemory Trainer::predicted_memory() const {
  const Impl& s = *impl_;
  StepOptions so = step_options();
  so.profile = nullptr;
  if (!s.dp) return dry_run_step(s.opt.model, s.micro, s.T, s.accum, so, s.data_bytes);
  // This rank's step: its micro-batches (every rank's, when it emulates them) with the reduction's
  // buffers, made by the same code inside the dry run.
  const TrainOptions& o = s.opt;
  so.make_extension = [&o, &s](Model& model) -> std::unique_ptr<StepExtension> {
    return std::make_unique<dist::DataParallel>(model, dist::Comm::world(), parallelism_of(o, s.rank_accum));
  };
  return dry_run_step(s.opt.model, s.micro, s.T, s.rank_accum * s.dp->local_ranks(), so, s.data_bytes);
}

float Trainer::step(int64_t step, StepMeasure* measure) {
  Impl& s = *impl_;
  const TrainOptions& o = s.opt;
  signal_point("step");
  threads::adapt();  // between parallel regions: the team may shrink or grow (core/threads.h)
  s.model->zero_grad();
  const StepOptions so = step_options();
  double loss = 0;
  const double count = double(s.micro * s.T * s.accum);
  double norm = 0;
  if (!s.dp) {
    for (int64_t k = 0; k < s.accum; ++k) {
      s.sampler->sample(uint64_t(step * s.accum + k), s.batch->inputs(), s.batch->targets());
      loss += forward_backward(*s.model, s.batch->micro_batch(), count, step_rng(o.seed, uint64_t(step), uint64_t(k)),
                               so, measure);
    }
    norm = grad_norm(*s.model);
  } else {
    // Rank r runs the step's micro-batches r*A .. r*A + A-1 (A per rank): the batches and dropout
    // streams one process accumulating all of them would run, disjoint across ranks.
    dist::DataParallel& dp = *s.dp;
    StepOptions ranked = so;
    ranked.before_action = [&dp](const Action& a) { dp.before_action(a); };
    ranked.after_action = [&dp](const Action& a) { dp.after_action(a); };
    dp.before_step(so.schedule);
    for (int l = 0; l < dp.local_ranks(); ++l) {
      const int64_t r = dp.first_rank() + l;
      dp.begin_rank(l);
      double rank_loss = 0;
      for (int64_t j = 0; j < s.rank_accum; ++j) {
        const int64_t k = r * s.rank_accum + j;
        s.sampler->sample(uint64_t(step * s.accum + k), s.batch->inputs(), s.batch->targets());
        rank_loss += forward_backward(*s.model, s.batch->micro_batch(), count,
                                      step_rng(o.seed, uint64_t(step), uint64_t(k)), ranked, measure);
        dp.after_micro_batch();
      }
      dp.end_rank(l, rank_loss);
    }
    dp.after_backward();
    loss = dp.loss_sum();
    norm = dp.grad_norm();
  }
  // The global gradient norm (every step: a non-finite one stops or skips the step), then clipping
  // and AdamW.
  const auto t_opt = std::chrono::steady_clock::now();
  s.last_norm = norm;
  s.last_finite = std::isfinite(loss) && std::isfinite(norm);
  if (s.last_finite) {
    const AdamWSettings aw{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.clip};
    adamw_step(*s.model, s.m, s.v, aw, norm, float(lr_at(step)), step + 1, so.optimizer_shard,
               s.dp ? s.dp->parameter_chunks() : nullptr);
    if (s.dp) s.dp->after_update();
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

void Trainer::whole_parameters() {
  if (impl_->dp) impl_->dp->unshard();
}

float Trainer::validate() {
  Impl& s = *impl_;
  whole_parameters();
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
  const tok::Tokenizer* t = impl_->tokenizer.get();
  std::vector<int32_t> prompt{model.config().V > '\n' ? int32_t('\n') : 0};
  if (t) {  // the model's own tokenizer: its newline, or its document start
    so.vocab = t->vocab_size();
    prompt = t->encode("\n");
    if (prompt.empty()) prompt = {t->document_start().value_or(0)};
  }
  const std::vector<int32_t> out = generate(model, prompt, so);
  if (t) return t->decode(out);
  // A byte-level model prints text, whatever its training data was (a token file too).
  if (byte_level(model.config())) return bytes_text(out);
  std::string ids;  // token ids: remat has no tokenizer for non-byte vocabularies
  for (size_t i = 0; i < out.size(); ++i) ids.append(i > 0 ? " " : "").append(std::to_string(out[i]));
  return std::string("(token ids) ").append(ids);
}

}  // namespace remat
