// What a Trainer checks before it allocates anything (trainer_impl.h): the options, the ranks'
// agreement on the run, and the named-tensor policies.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/error.h"
#include "core/record.h"
#include "core/text.h"
#include "dist/comm.h"
#include "planner/planner.h"
#include "train/trainer_impl.h"

namespace remat {

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

TrainShape check_train_options(const TrainOptions& o) {
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
      throw Error("train", std::string(flag) + " must be >= 0, got " + short_number(v), std::string("e.g. ") + example);
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
    throw Error("train", "--val-fraction must be between 0 and 1 (exclusive), got " + short_number(o.val_fraction),
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
  if (o.zero == 2)
    throw Error("train", "--zero 2 is not supported: remat shards AdamW's state (--zero 1), or the parameters, "
                         "gradients and AdamW's state (--zero 3)",
                "use --zero 1 or --zero 3");
  if (o.zero != 0 && o.zero != 1 && o.zero != 3)
    throw Error("train", "--zero must be 0, 1 or 3, got " + std::to_string(o.zero), "e.g. --zero 1");
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
  return {micro, T};
}

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

}  // namespace remat
