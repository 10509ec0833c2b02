#include "planner/calibration.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/error.h"

namespace remat::planner {

using nlohmann::json;

namespace {
constexpr const char* kFormat = "remat-calibration";

std::string remeasure_hint(const std::string& source) {
  return "measure it anew with the same model flags, --batch, --threads and --clock: remat calibrate ... --out " + source;
}

[[noreturn]] void corrupt(const std::string& source, const std::string& what) {
  throw Error("calibration", quote_name(source) + " is not a usable calibration file: " + what,
              "write it with remat calibrate --out " + source);
}

const json& field(const json& j, const char* key, const std::string& where, const std::string& source) {
  if (!j.is_object() || !j.contains(key)) corrupt(source, "missing \"" + where + key + "\"");
  return j[key];
}

double seconds(const json& j, const char* key, const std::string& where, const std::string& source) {
  const json& v = field(j, key, where, source);
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0)
    corrupt(source, "\"" + where + key + "\" must be a non-negative number of seconds, got " + printable(v.dump(), 40));
  return v.get<double>();
}

int64_t integer(const json& j, const char* key, const std::string& where, const std::string& source,
                int64_t lo = 0) {
  const json& v = field(j, key, where, source);
  if (!v.is_number_integer() || v.get<int64_t>() < lo)
    corrupt(source, "\"" + where + key + "\" must be an integer >= " + std::to_string(lo) + ", got " +
                        printable(v.dump(), 40));
  return v.get<int64_t>();
}

std::string text(const json& j, const char* key, const std::string& where, const std::string& source) {
  const json& v = field(j, key, where, source);
  if (!v.is_string()) corrupt(source, "\"" + where + key + "\" must be a string");
  return v.get<std::string>();
}

float real(const json& j, const char* key, const std::string& where, const std::string& source) {
  const json& v = field(j, key, where, source);
  if (!v.is_number() || !std::isfinite(v.get<double>())) corrupt(source, "\"" + where + key + "\" must be a number");
  return float(v.get<double>());
}

json config_json(const ModelConfig& c) {
  return json{{"arch", arch_name(c.arch)}, {"layers", c.L},          {"channels", c.C},
              {"heads", c.NH},             {"kv_heads", c.KVH},      {"block_size", c.T},
              {"vocab", c.V},              {"hidden", c.hidden},     {"rope_theta", double(c.rope_theta)},
              {"norm_eps", double(c.norm_eps)}, {"dropout", double(c.dropout)},
              {"attention", autograd::attention_kind_name(c.attention)}};
}

ModelConfig parse_config(const json& j, const std::string& source) {
  const std::string w = "model.";
  ModelConfig c;
  const std::string arch = text(j, "arch", w, source);
  if (arch != arch_name(Arch::GPT2) && arch != arch_name(Arch::Llama)) corrupt(source, "unknown arch " + quote_name(arch));
  c.arch = arch == arch_name(Arch::GPT2) ? Arch::GPT2 : Arch::Llama;
  c.L = integer(j, "layers", w, source, 1);
  c.C = integer(j, "channels", w, source, 1);
  c.NH = integer(j, "heads", w, source, 1);
  c.KVH = integer(j, "kv_heads", w, source);
  c.T = integer(j, "block_size", w, source, 1);
  c.V = integer(j, "vocab", w, source, 1);
  c.hidden = integer(j, "hidden", w, source);
  c.rope_theta = real(j, "rope_theta", w, source);
  c.norm_eps = real(j, "norm_eps", w, source);
  c.dropout = real(j, "dropout", w, source);
  const std::string att = text(j, "attention", w, source);
  bool known = false;
  for (auto k : {autograd::AttentionKind::Naive, autograd::AttentionKind::Flash})
    if (att == autograd::attention_kind_name(k)) c.attention = k, known = true;
  if (!known) corrupt(source, "unknown attention kernel " + quote_name(att));
  return c;
}
}  // namespace

int Calibration::policy_index(const std::string& name) const {
  std::string have;
  for (size_t p = 0; p < policies.size(); ++p) {
    if (policies[p].name == name) return int(p);
    have += (have.empty() ? "" : ", ") + policies[p].name;
  }
  throw Error("calibration", "policy " + quote_name(name) + " was not calibrated (the file has: " + have + ")",
              "calibrate it: remat calibrate ... --policies " + (have.empty() ? name : have + "," + name));
}

std::string calibration_json(const Calibration& c) {
  json pol = json::array();
  for (const auto& p : c.policies)
    pol.push_back({{"name", p.name},
                   {"forward_store", p.forward_store},
                   {"recompute_store", p.recompute_store},
                   {"backward_stored", p.backward_stored},
                   {"backward_replayed", p.backward_replayed}});
  json j{{"format", kFormat},
         {"version", Calibration::kVersion},
         {"model", config_json(c.cfg)},
         {"batch", c.B},
         {"seq", c.T},
         {"threads", c.threads},
         {"repeats", c.repeats},
         {"clock", c.clock},
         {"step", {{"embed_forward", c.embed_forward},
                   {"head_forward", c.head_forward},
                   {"head_backward", c.head_backward},
                   {"embed_backward", c.embed_backward},
                   {"rest", c.rest}}},
         {"block", {{"forward_pass", c.forward_pass},
                    {"recompute_pass", c.recompute_pass},
                    {"free_checkpoint", c.free_checkpoint}}},
         {"policies", pol}};
  return j.dump(1) + "\n";
}

Calibration parse_calibration(const std::string& body, const std::string& source) {
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) corrupt(source, "not valid JSON");
  if (!j.is_object()) corrupt(source, "not a JSON object");
  if (!j.contains("format") || j["format"] != kFormat) corrupt(source, "no \"format\": \"" + std::string(kFormat) + "\"");
  const int64_t version = integer(j, "version", "", source);
  if (version != Calibration::kVersion)
    throw Error("calibration",
                quote_name(source) + " is calibration version " + std::to_string(version) + ", this remat reads version " +
                    std::to_string(Calibration::kVersion),
                remeasure_hint(source));
  Calibration c;
  c.cfg = parse_config(field(j, "model", "", source), source);
  c.B = integer(j, "batch", "", source, 1);
  c.T = integer(j, "seq", "", source, 1);
  c.threads = int(integer(j, "threads", "", source, 1));
  c.repeats = int(integer(j, "repeats", "", source, 1));
  c.clock = text(j, "clock", "", source);
  if (c.clock != "wall" && c.clock != "cpu") corrupt(source, "\"clock\" must be \"wall\" or \"cpu\"");
  const json& st = field(j, "step", "", source);
  c.embed_forward = seconds(st, "embed_forward", "step.", source);
  c.head_forward = seconds(st, "head_forward", "step.", source);
  c.head_backward = seconds(st, "head_backward", "step.", source);
  c.embed_backward = seconds(st, "embed_backward", "step.", source);
  c.rest = seconds(st, "rest", "step.", source);
  const json& bl = field(j, "block", "", source);
  c.forward_pass = seconds(bl, "forward_pass", "block.", source);
  c.recompute_pass = seconds(bl, "recompute_pass", "block.", source);
  c.free_checkpoint = seconds(bl, "free_checkpoint", "block.", source);
  const json& pol = field(j, "policies", "", source);
  if (!pol.is_array() || pol.empty()) corrupt(source, "\"policies\" must be a non-empty list");
  for (const json& p : pol) {
    Calibration::PolicyCosts pc;
    pc.name = text(p, "name", "policies[].", source);
    for (const auto& q : c.policies)
      if (q.name == pc.name) corrupt(source, "policy " + quote_name(pc.name) + " appears twice");
    pc.forward_store = seconds(p, "forward_store", "policies[].", source);
    pc.recompute_store = seconds(p, "recompute_store", "policies[].", source);
    pc.backward_stored = seconds(p, "backward_stored", "policies[].", source);
    pc.backward_replayed = seconds(p, "backward_replayed", "policies[].", source);
    c.policies.push_back(pc);
  }
  return c;
}

void save_calibration(const Calibration& c, const std::string& path) { write_file_atomic(path, calibration_json(c)); }

Calibration load_calibration(const std::string& path) { return parse_calibration(read_file(path), path); }

void check_calibration(const Calibration& c, const ModelConfig& cfg, int64_t B, int64_t T, int threads,
                       const std::string& clock, const std::string& source) {
  const json want = config_json(cfg), have = config_json(c.cfg);
  std::string diff;
  for (const auto& [key, v] : want.items())
    if (have[key] != v) {
      diff = "model " + key + " " + have[key].dump() + " (this run: " + v.dump() + ")";
      break;
    }
  if (diff.empty() && c.B != B) diff = "micro-batch " + std::to_string(c.B) + " (this run: " + std::to_string(B) + ")";
  if (diff.empty() && c.T != T) diff = "seq " + std::to_string(c.T) + " (this run: " + std::to_string(T) + ")";
  if (diff.empty() && c.threads != threads)
    diff = std::to_string(c.threads) + (c.threads == 1 ? " thread" : " threads") + " (this run: " + std::to_string(threads) + ")";
  if (diff.empty() && c.clock != clock) diff = "the " + c.clock + " clock (this run: " + clock + ")";
  if (!diff.empty())
    throw Error("calibration", quote_name(source) + " was measured for another run: " + diff, remeasure_hint(source));
}

TimePrediction predict_time(const Calibration& cal, const Schedule& s, const std::vector<int>& block_policy) {
  REMAT_ASSERT(!cal.policies.empty(), "calibration without policies");
  TimePrediction t;
  t.fixed = cal.fixed();
  std::vector<char> replayed;  // per block: were its internals recorded by a replay?
  auto policy = [&](int i) -> const Calibration::PolicyCosts& {
    const int p = block_policy.empty() ? 0 : block_policy.at(size_t(i));
    REMAT_ASSERT(p >= 0 && size_t(p) < cal.policies.size(), "predict_time: policy index out of range");
    return cal.policies[size_t(p)];
  };
  for (const Action& a : s) {
    if (size_t(a.block) >= replayed.size()) replayed.resize(size_t(a.block) + 1, 0);
    switch (a.kind) {
      case Action::Kind::Forward:
        if (a.keep == Keep::Internals) {
          (a.recompute ? t.recompute : t.forward) +=
              a.recompute ? policy(a.block).recompute_store : policy(a.block).forward_store;
          replayed[size_t(a.block)] = a.recompute;
        } else {
          (a.recompute ? t.recompute : t.forward) += a.recompute ? cal.recompute_pass : cal.forward_pass;
        }
        break;
      case Action::Kind::Backward:
        if (replayed[size_t(a.block)]) {
          t.backward += policy(a.block).backward_replayed;
          ++t.replayed_backwards;
        } else {
          t.backward += policy(a.block).backward_stored;
          ++t.stored_backwards;
        }
        break;
      case Action::Kind::Free: t.free += cal.free_checkpoint; break;
    }
  }
  t.step = t.fixed + t.forward + t.recompute + t.backward + t.free;
  return t;
}

std::vector<int> calibration_indices(const Calibration& cal, const std::vector<std::string>& names) {
  std::vector<int> out;
  for (const std::string& n : names) out.push_back(cal.policy_index(n));
  return out;
}

double optimizer_step_seconds(const Calibration& cal, const TimePrediction& t, int64_t accum) {
  return double(accum) * (t.step - cal.rest) + cal.rest;
}

double store_premium(const Calibration& cal, int p) {
  const auto& c = cal.policies.at(size_t(p));
  return (c.forward_store - cal.forward_pass + c.backward_stored) -
         (c.recompute_store - cal.recompute_pass + c.backward_replayed);
}

TimeModel calibrated_time(const Calibration& cal, const std::vector<std::string>& policy_names) {
  // Copies: the TimeModel outlives the call. pol[p]: the calibration's costs of the DP's policy p.
  std::vector<Calibration::PolicyCosts> pol;
  for (int q : calibration_indices(cal, policy_names)) pol.push_back(cal.policies[size_t(q)]);
  TimeModel tm;
  tm.forward_pass = [f = cal.forward_pass](int) { return f; };
  tm.recompute_pass = [r = cal.recompute_pass](int) { return r; };
  tm.free_checkpoint = [x = cal.free_checkpoint](int) { return x; };
  tm.forward_store = [pol](int, int p) { return pol.at(size_t(p)).forward_store; };
  tm.recompute_store = [pol](int, int p) { return pol.at(size_t(p)).recompute_store; };
  tm.backward_stored = [pol](int, int p) { return pol.at(size_t(p)).backward_stored; };
  tm.backward_replayed = [pol](int, int p) { return pol.at(size_t(p)).backward_replayed; };
  tm.fixed = cal.fixed();
  return tm;
}

}  // namespace remat::planner
