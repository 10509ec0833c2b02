// The run: one typed value for what `remat train` is asked to do. The CLI resolves it once from the
// flags (--recompute, --policy, --save-*, --budget, --plan, --resume and the model flags); the trainer,
// the step, the report and every file take it as it is: a checkpoint's state.json is this value
// through its one codec (record.h), and --resume compares it field by field.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/schedule.h"
#include "model/model.h"

namespace remat {

struct RunConfig {
  static constexpr int kVersion = 3;  // of its codec (state.json's "options"); 1 lacked the fields marked (v2), 2 those marked (v3)

  // The model: architecture, sizes, attention kernel, precision and fp32 residual stream (v2).
  ModelConfig model;

  // The data and its split.
  std::string data;                  // "" = built-in corpus
  std::string data_format = "auto";  // auto | text | u16 | llmc (for data and val_data)
  std::string val_data;              // "" = validate on the last val_fraction of `data`; else this file
  double val_fraction = 0.1;         // 0 < f < 1, without val_data
  int64_t random_tokens = 0;         // > 0: ignore `data`, use this many uniform random tokens (benchmarks)
  // (v3) Text data (and the end-of-run sample) through this tokenizer (tokenizer/tokenizer.h: a model
  // folder or a tokenizer file); "" reads text byte by byte.
  std::string tokenizer;

  // The batch.
  int64_t steps = 200;
  int64_t batch = 8;        // sequences per optimizer step
  int64_t micro_batch = 0;  // sequences per forward (0 = batch)
  int64_t seq = 0;          // 0 = model block size

  // The optimizer (AdamW) and its learning-rate schedule: linear warmup, then cosine from lr to
  // lr * min_lr_ratio over lr_decay_steps (0: over `steps`), then flat.
  float lr = 1e-3f, min_lr_ratio = 0.1f, weight_decay = 0.1f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  int64_t warmup = 20;
  int64_t lr_decay_steps = 0;  // (v2)
  float clip = 1.0f;           // 0 = off
  uint64_t seed = 1337;

  // How a step runs. As typed: a strategy, or a policy preset (selective | gelu | norms), with a policy.
  std::string recompute = "none";
  std::string policy = "none";
  std::string save_only, save_all_but;  // comma-separated tensor names (JAX-style named policies)
  bool recompute_last = false;
  bool replay_internals = false;  // --segment-replay internals
  // A plan's (--plan, --budget; v2): when `schedule` is set it is the step's schedule, and the strings
  // above only label the run; `block_policy`, when not empty, names each block's policy ("none" or a
  // preset of the model), overriding the policy options for the blocks; `block_attention`, when not
  // empty, is each block's attention kernel (else model.attention on every block).
  std::optional<Schedule> schedule;
  std::vector<std::string> block_policy;
  std::vector<autograd::AttentionKind> block_attention;

  // Data parallelism (v3): the ranks the batch is split over (mpirun's processes, or emulated by one
  // process: the same bits), and the ZeRO stage (Rajbhandari et al. 2020): 0 replicates AdamW's
  // state on every rank, 1 shards it.
  int64_t ranks = 1;
  int64_t zero = 0;

  // Checkpoints.
  int64_t save_every = 0;  // 0: only at the end (and when stopped)
  int64_t keep = 2;        // checkpoints kept in save_dir

  template <class S, class V>
  static void fields(S& s, V&& v) {
    v("model", s.model);
    v("data", s.data), v("data_format", s.data_format), v("val_data", s.val_data), v("val_fraction", s.val_fraction);
    v("random_tokens", s.random_tokens), v("tokenizer", s.tokenizer);
    v("steps", s.steps), v("batch", s.batch), v("micro_batch", s.micro_batch), v("seq", s.seq);
    v("lr", s.lr), v("min_lr_ratio", s.min_lr_ratio), v("weight_decay", s.weight_decay), v("beta1", s.beta1);
    v("beta2", s.beta2), v("eps", s.eps), v("warmup", s.warmup), v("lr_decay_steps", s.lr_decay_steps);
    v("clip", s.clip), v("seed", s.seed);
    v("recompute", s.recompute), v("policy", s.policy), v("save_only", s.save_only), v("save_all_but", s.save_all_but);
    v("recompute_last", s.recompute_last), v("replay_internals", s.replay_internals);
    v("schedule", s.schedule), v("block_policy", s.block_policy), v("block_attention", s.block_attention);
    v("ranks", s.ranks), v("zero", s.zero);
    v("save_every", s.save_every), v("keep", s.keep);
  }
  bool operator==(const RunConfig&) const = default;

  // The steps the cosine decay spans: lr_decay_steps, or the run's steps when that is 0.
  int64_t decay_steps() const { return lr_decay_steps > 0 ? lr_decay_steps : steps; }
  // The learning rate of 0-based step `step`.
  double lr_at(int64_t step) const;
};

}  // namespace remat
