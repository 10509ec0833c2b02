// Plan files and what a plan says of itself: its attention label, its short spelling, the run it
// sets (apply_plan), the file's one codec and the check that a plan is for this run.
#include "planner/budget.h"

#include <omp.h>

#include <algorithm>
#include <limits>
#include <optional>

#include "core/allocator.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/record.h"

namespace remat {

namespace {
std::optional<std::string> uniform_policy(const StepPlan& p) {
  for (const std::string& n : p.block_policy)
    if (n != p.block_policy.front()) return std::nullopt;
  return p.block_policy.empty() ? std::string("none") : p.block_policy.front();
}
}  // namespace

std::string attention_label(autograd::AttentionKind model_kind, const std::vector<autograd::AttentionKind>& blocks) {
  if (blocks.empty()) return autograd::attention_kind_name(model_kind);
  std::string out = "per block:";
  for (size_t i = 0; i < blocks.size();) {  // runs: "per block: 0-3 naive, 4-11 flash"
    size_t j = i;
    while (j + 1 < blocks.size() && blocks[j + 1] == blocks[i]) ++j;
    out += std::string(i == 0 ? " " : ", ") + std::to_string(i) + (j > i ? "-" + std::to_string(j) : "") + " " +
           autograd::attention_kind_name(blocks[i]);
    i = j + 1;
  }
  return out;
}

std::string attention_label(const StepPlan& p) { return attention_label(p.cfg.attention, p.block_attention); }

std::string short_spelling(const StepPlan& p) {
  if (!p.block_attention.empty()) return "";  // no flag spells a kernel per block
  const std::optional<std::string> pol = uniform_policy(p);
  if (!pol) return "";
  const std::optional<StrategySpec> s = named_strategy(p.schedule, int(p.cfg.L));
  if (!s) return "";
  std::string out = "--recompute " + s->base_label();
  if (s->recompute_last && s->name != "none") out += " --recompute-last";
  if (s->replay_internals && s->name != "none" && s->name != "all" && s->name != "block")
    out += " --segment-replay internals";
  if (*pol != "none") out += " --policy " + *pol;
  return out;
}

void apply_plan(const StepPlan& p, RunConfig& o) {
  o.model = p.cfg;
  o.batch = p.batch;
  o.micro_batch = p.micro;
  o.seq = p.T;
  o.schedule = p.schedule;
  o.block_policy = p.block_policy;
  o.block_attention = p.block_attention;  // empty unless the kernel differs between blocks
  // The spelling only labels the run: the typed plan above is what runs.
  o.policy = "none";
  o.save_only.clear();
  o.save_all_but.clear();
  const std::optional<StrategySpec> s = named_strategy(p.schedule, int(p.cfg.L));
  o.recompute = s ? s->base_label() : "plan";
  o.recompute_last = s && s->recompute_last;
  o.replay_internals = s && s->replay_internals;
}

nlohmann::json plan_to_json(const StepPlan& p) {
  nlohmann::json j = record::to_json(static_cast<const PlanSpec&>(p));
  j["format"] = "remat-plan";
  j["version"] = kPlanVersion;
  j["summary"] = p.summary;
  j["predicted"] = {{"peak_total_bytes", p.step.peak_total},
                    {"peak_activation_bytes", p.activation_peak},
                    {"persistent_bytes", p.step.persistent},
                    {"overhead", p.compute.overhead()}};
  if (p.seconds) j["predicted"]["step_seconds"] = *p.seconds;  // by the calibration it was planned with
  return j;
}

namespace {
[[noreturn]] void bad_plan(const std::string& where, const std::string& what) {
  throw Error("plan", "plan file '" + where + "': " + what,
              "write it again with remat plan ... --budget SIZE --out " + where);
}
}  // namespace

StepPlan plan_from_json(const nlohmann::json& file, const std::string& where) {
  if (!file.is_object()) bad_plan(where, "not a JSON object");
  if (!file.contains("format") || file["format"] != "remat-plan")
    bad_plan(where, "not a remat plan (no \"format\": \"remat-plan\")");
  if (!file.contains("version") || !file["version"].is_number_integer())
    bad_plan(where, "\"version\" is missing or not an integer");
  if (file["version"] == 1 || file["version"] == 2)
    bad_plan(where, "version " + file["version"].dump() + " does not record the precision (a bf16 plan would train in "
                    "fp32); this remat reads version " + std::to_string(kPlanVersion));
  if (file["version"] != kPlanVersion)
    bad_plan(where, "unknown version " + printable(file["version"].dump(), 20) + " (this remat reads version " +
                        std::to_string(kPlanVersion) + ")");
  nlohmann::json j = file;
  StepPlan p;
  if (j.contains("summary") && j["summary"].is_string()) p.summary = j["summary"].get<std::string>();
  if (j.contains("predicted") && j["predicted"].is_object()) {
    const nlohmann::json& pr = j["predicted"];
    if (pr.contains("peak_total_bytes") && pr["peak_total_bytes"].is_number_unsigned())
      p.step.peak_total = pr["peak_total_bytes"].get<size_t>();
    if (pr.contains("peak_activation_bytes") && pr["peak_activation_bytes"].is_number_unsigned())
      p.activation_peak = pr["peak_activation_bytes"].get<size_t>();
  }
  for (const char* key : {"format", "version", "summary", "predicted"}) j.erase(key);
  try {
    record::from_json(j, static_cast<PlanSpec&>(p));
  } catch (const record::FieldError& e) {
    bad_plan(where, "field \"" + e.path + "\" " + e.what());
  }
  try {
    p.cfg.validate();
  } catch (const Error& e) {
    bad_plan(where, std::string("its model is invalid: ") + e.what());
  }
  for (const auto& [key, v] : {std::pair{"batch", p.batch}, {"micro_batch", p.micro}, {"seq", p.T}})
    if (v <= 0) bad_plan(where, std::string("field \"") + key + "\" must be a positive integer, got " + std::to_string(v));
  if (p.threads < 0) bad_plan(where, "field \"threads\" must be the thread count it was planned at");
  if (p.batch % p.micro != 0)
    bad_plan(where, "micro_batch " + std::to_string(p.micro) + " does not divide batch " + std::to_string(p.batch));
  if (p.T > p.cfg.T) bad_plan(where, "seq " + std::to_string(p.T) + " is above the model's block size " + std::to_string(p.cfg.T));
  const int L = int(p.cfg.L);
  if (p.block_policy.size() != size_t(L))
    bad_plan(where, "block_policy has " + std::to_string(p.block_policy.size()) + " entries for " + std::to_string(L) + " blocks");
  const auto model = planner::shape_only_model(p.cfg);
  for (const std::string& name : p.block_policy)
    if (!model->has_policy(name)) {
      std::string names;
      for (const std::string& k : model->policy_names()) names += (names.empty() ? "" : ", ") + k;
      bad_plan(where, "unknown policy '" + printable(name, 40) + "' for " + arch_name(p.cfg.arch) + " (its policies are " + names + ")");
    }
  try {
    validate_schedule(p.schedule, L);
  } catch (const Error& e) {
    bad_plan(where, std::string("its schedule is not valid for ") + std::to_string(L) + " blocks: " + e.what());
  }
  if (!p.block_attention.empty() && p.block_attention.size() != size_t(L))
    bad_plan(where, "block_attention has " + std::to_string(p.block_attention.size()) + " entries for " + std::to_string(L) + " blocks");
  return p;
}

void write_plan_file(const std::string& path, const StepPlan& p) { write_file_atomic(path, plan_to_json(p).dump(2) + "\n"); }

StepPlan read_plan_file(const std::string& path) {
  const std::string text = read_file(path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    bad_plan(path, "not valid JSON, truncated or corrupt (byte " + std::to_string(e.byte) + " of " +
                       std::to_string(text.size()) + ")");
  }
  return plan_from_json(j, path);
}

void check_plan_target(const StepPlan& p, const ModelConfig& cfg, bool attention_given, int64_t batch, int64_t micro,
                       int64_t T, int64_t threads, const std::string& path) {
  PlanSpec run;
  run.cfg = cfg;
  if (!attention_given) run.cfg.attention = p.cfg.attention;
  run.batch = batch;
  run.micro = micro;
  run.T = T;
  run.threads = p.threads > 0 ? threads : 0;  // 0: a file from before plans recorded their threads
  // What each block does is the plan's to say.
  run.schedule = p.schedule;
  run.block_policy = p.block_policy;
  run.block_attention = p.block_attention;
  const std::vector<record::Difference> d = record::diff(static_cast<const PlanSpec&>(p), run);
  if (d.empty()) return;
  throw Error("plan", "plan file '" + path + "' was made for another run: " + record::describe(d, "plan", "this run"),
              "train with the plan's model, batch and thread flags (remat plan printed them on its use: line), or plan "
              "again for this run");
}

}  // namespace remat
