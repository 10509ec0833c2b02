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
#include "train/run_data.h"
#include "train/run_state.h"
#include "train/save_dir.h"
#include "train/trainer_impl.h"
#include "core/signal_point.h"

namespace remat {

namespace {
std::string fmt_g(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

// Every rank of an mpirun must run the same run on the same data: each one's run description and
// data fingerprints against rank 0's, the differing fields named.
void check_ranks_agree(const RunConfig& o, const Fingerprint& train, const Fingerprint& val) {
  const dist::Comm& world = dist::Comm::world();
  const nlohmann::json mine = {{"run", record::to_json(o)}, {"train", record::to_json(train)}, {"val", record::to_json(val)}};
  const std::vector<std::string> all = world.allgather(mine.dump());
  const nlohmann::json first = nlohmann::json::parse(all.front());
  if (mine == first) return;
  RunConfig zero;
  record::from_json(first.at("run"), zero);
  std::string what = record::describe(record::diff(zero, o), "rank 0", "rank " + std::to_string(world.rank()));
  if (mine.at("train") != first.at("train") || mine.at("val") != first.at("val"))
    what += std::string(what.empty() ? "" : "; ") + "the data differ (rank 0's training tokens " +
            first.at("train").dump() + ", this rank's " + mine.at("train").dump() + ")";
  throw Error("mpi", "rank " + std::to_string(world.rank()) + " was started with another run than rank 0: " + what,
              "start every rank with the same command line and data (mpirun -np N remat train ...)");
}

}  // namespace

Trainer::Trainer(const TrainOptions& o) {
  o.model.validate();
  if (o.steps < 0) throw Error("train", "--steps must be >= 0", "e.g. --steps 200");
  if (o.batch <= 0) throw Error("train", "--batch must be positive, got " + std::to_string(o.batch), "e.g. --batch 8");
  // Without --micro-batch: one micro-batch per rank.
  const int64_t micro = o.micro_batch != 0 ? o.micro_batch : o.ranks > 1 && o.batch % o.ranks == 0 ? o.batch / o.ranks : o.batch;
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
  const dist::Comm& world = dist::Comm::world();
  if (o.zero == 2 || o.zero == 3)
    throw Error("train", "--zero " + std::to_string(o.zero) + " is not supported: remat shards AdamW's state (--zero 1), "
                         "not the gradients or the parameters yet",
                "use --zero 1 (optimizer state sharded over the ranks) or --zero 0 (replicated)");
  if (o.zero != 0 && o.zero != 1)
    throw Error("train", "--zero must be 0 or 1, got " + std::to_string(o.zero), "e.g. --zero 1");
  if (o.ranks < 1 || o.ranks > 4096)
    throw Error("train", "--ranks must be between 1 and 4096, got " + std::to_string(o.ranks), "e.g. --ranks 2");
  if (world.size() > 1 && o.ranks != world.size())
    throw Error("train", "--ranks " + std::to_string(o.ranks) + " but mpirun started " + std::to_string(world.size()) +
                             " processes",
                "drop --ranks under mpirun (it is the process count), or run mpirun -np " + std::to_string(o.ranks));
  if (o.batch % (o.ranks * micro) != 0)
    throw Error("train", "--batch " + std::to_string(o.batch) + " does not divide over " + std::to_string(o.ranks) +
                             " ranks of --micro-batch " + std::to_string(micro),
                "make --batch a multiple of ranks x micro-batch, " + std::to_string(o.ranks * micro) + " (e.g. --batch " +
                    std::to_string(o.ranks * micro * std::max<int64_t>(1, o.batch / (o.ranks * micro))) + ")");
  if (!o.resume.empty() && !o.init_from.empty())
    throw Error("train", "--resume and --init-from cannot be combined",
                "--resume continues a run with its weights and optimizer state; --init-from starts a new one");
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
  if (world.size() > 1) check_ranks_agree(o, s.train_data.fingerprint(), s.val_data.fingerprint());
  s.sampler = std::make_unique<data::BatchSampler>(s.train_data, micro, T, o.seed);
  s.val_sampler = std::make_unique<data::BatchSampler>(s.val_data, micro, T, o.seed + 1);
  // Split parts share their parent's buffer; --val-data is a buffer of its own (0 bytes when mapped).
  s.data_bytes = s.train_data.buffer_bytes() +
                 (o.val_data.empty() || o.random_tokens > 0 ? 0 : s.val_data.buffer_bytes());
  s.rank_accum = s.accum / o.ranks;
  if (o.ranks > 1) s.dp = std::make_unique<dist::DataParallel>(*s.model, world, dist::Parallelism{int(o.ranks), int(o.zero), s.rank_accum, o.overlap_reduction});
  const Shard shard = s.dp ? s.dp->shard() : Shard{};
  make_adamw_moments(*s.model, &s.m, &s.v, shard);
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
bool Trainer::last_step_finite() const { return impl_->last_finite; }

std::string Trainer::save_checkpoint(int64_t step) {
  Impl& s = *impl_;
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
  Model& model = *s.model;
  const TrainOptions& o = s.opt;
  so.make_extension = [&model, &o, &s]() -> std::unique_ptr<StepExtension> {
    return std::make_unique<dist::DataParallel>(model, dist::Comm::world(),
                                                dist::Parallelism{int(o.ranks), int(o.zero), s.rank_accum, o.overlap_reduction});
  };
  return dry_run_step(s.opt.model, s.micro, s.T, s.rank_accum * s.dp->local_ranks(), so, s.data_bytes);
}

float Trainer::step(int64_t step, StepMeasure* measure) {
  Impl& s = *impl_;
  const TrainOptions& o = s.opt;
  signal_point("step");
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
    ranked.after_action = [&dp](const Action& a) { dp.after_action(a); };
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
    adamw_step(*s.model, s.m, s.v, aw, norm, float(lr_at(step)), step + 1, so.optimizer_shard);
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
