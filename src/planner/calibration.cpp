#include "planner/calibration.h"

#include <cmath>
#include <cstdio>
#include <tuple>
#include <type_traits>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/text.h"
#include "core/record.h"

namespace remat::planner {

using nlohmann::json;

namespace {
constexpr const char* kFormat = "remat-calibration";
// Bounds of a calibration's numbers: a day per action is far beyond any block of a model remat can
// hold; counts (batch, seq, repeats) as the flags that set them.
constexpr double kMaxSeconds = 86400;
constexpr int64_t kMaxCount = (int64_t(1) << 31) - 1;


std::string remeasure_hint(const std::string& source) {
  return "measure it anew with the same model flags, --batch, --threads and --clock: remat calibrate ... --out " + source;
}

[[noreturn]] void corrupt(const std::string& source, const std::string& what) {
  throw Error("calibration", quote_name(source) + " is not a usable calibration file: " + what,
              "write it with remat calibrate --out " + source);
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
  json j = record::to_json(c);
  j["format"] = kFormat;
  j["version"] = Calibration::kVersion;
  return j.dump(1) + "\n";
}

Calibration parse_calibration(const std::string& body, const std::string& source) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) corrupt(source, "not valid JSON");
  if (!j.is_object()) corrupt(source, "not a JSON object");
  if (!j.contains("format") || j["format"] != kFormat) corrupt(source, "no \"format\": \"" + std::string(kFormat) + "\"");
  if (!j.contains("version") || !j["version"].is_number_integer()) corrupt(source, "\"version\" is missing or not an integer");
  if (j["version"] != Calibration::kVersion)
    throw Error("calibration",
                quote_name(source) + " is calibration version " + printable(j["version"].dump(), 20) +
                    ", this remat reads version " + std::to_string(Calibration::kVersion) +
                    (j["version"] == 1 ? " (version 1 does not record the precision it was measured in)" : ""),
                remeasure_hint(source));
  j.erase("format");
  j.erase("version");
  Calibration c;
  try {
    record::from_json(j, c);
  } catch (const record::FieldError& e) {
    corrupt(source, "\"" + e.path + "\" " + e.what());
  }
  for (const auto& [key, v] : {std::pair{"batch", int64_t(c.B)}, {"seq", c.T}, {"threads", c.threads}, {"repeats", c.repeats}})
    if (v < 1) corrupt(source, "\"" + std::string(key) + "\" must be at least 1, got " + std::to_string(v));
  if (c.clock != "wall" && c.clock != "cpu") corrupt(source, "\"clock\" must be \"wall\" or \"cpu\"");
  for (const auto& [key, v, max] : {std::tuple{"batch", int64_t(c.B), kMaxCount}, {"seq", c.T, kMaxCount},
                                    {"threads", int64_t(c.threads), int64_t(1024)}, {"repeats", int64_t(c.repeats), kMaxCount}})
    if (v > max) corrupt(source, "\"" + std::string(key) + "\" is " + std::to_string(v) + ", above " + std::to_string(max));
  // Every time is a number of seconds, at most kMaxSeconds; a block's passes take some time (a 0 would
  // make every plan that repeats them look free).
  auto check_time = [&](const std::string& key, double v, bool positive) {
    if (v < 0) corrupt(source, "a time is negative: \"" + key + "\" is " + short_number(v) + " seconds");
    if (positive && v == 0) corrupt(source, "\"" + key + "\" is 0 seconds; a block pass takes time");
    if (v > kMaxSeconds)
      corrupt(source, "\"" + key + "\" is " + short_number(v) + " seconds, more than " + short_number(kMaxSeconds));
  };
  Calibration::fields(c, [&](const char* key, const auto& f) {
    if constexpr (std::is_same_v<std::decay_t<decltype(f)>, double>)
      check_time(key, f, std::string(key) == "forward_pass" || std::string(key) == "recompute_pass");
  });
  for (size_t i = 0; i < c.policies.size(); ++i)
    Calibration::PolicyCosts::fields(c.policies[i], [&](const char* key, const auto& f) {
      if constexpr (std::is_same_v<std::decay_t<decltype(f)>, double>)
        check_time("policies[" + std::to_string(i) + "]." + key, f, true);
    });
  if (c.policies.empty()) corrupt(source, "\"policies\" must be a non-empty list");
  for (size_t p = 0; p < c.policies.size(); ++p)
    for (size_t q = 0; q < p; ++q)
      if (c.policies[q].name == c.policies[p].name) corrupt(source, "policy " + quote_name(c.policies[p].name) + " appears twice");
  try {
    c.cfg.validate();
  } catch (const Error& e) {
    corrupt(source, std::string("its model is invalid: ") + e.what());
  }
  return c;
}

void save_calibration(const Calibration& c, const std::string& path) { write_file_atomic(path, calibration_json(c)); }

Calibration load_calibration(const std::string& path) { return parse_calibration(read_file(path), path); }

void check_calibration(const Calibration& c, const ModelConfig& cfg, int64_t B, int64_t T, int threads,
                       const std::string& clock, const std::string& source) {
  Calibration run = c;  // the file's times, this run's key: only the key can differ
  run.cfg = cfg;
  run.B = B;
  run.T = T;
  run.threads = threads;
  run.clock = clock;
  const std::vector<record::Difference> d = record::diff(c, run);
  if (!d.empty())
    throw Error("calibration", quote_name(source) + " was measured for another run: " + record::describe(d, "file", "this run"),
                remeasure_hint(source));
}

namespace {
// The calibration as a TimeModel whose policy p is cal.policies[index[p]] (copies: the model outlives
// the call).
TimeModel time_model_of(const Calibration& cal, const std::vector<int>& index) {
  std::vector<Calibration::PolicyCosts> pol;
  for (int q : index) pol.push_back(cal.policies.at(size_t(q)));
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
}  // namespace

TimePrediction predict_time(const Calibration& cal, const Schedule& s, const std::vector<int>& block_policy) {
  REMAT_ASSERT(!cal.policies.empty(), "calibration without policies");
  std::vector<int> every(cal.policies.size());
  for (size_t p = 0; p < every.size(); ++p) every[p] = int(p);
  for (int p : block_policy)
    REMAT_ASSERT(p >= 0 && size_t(p) < cal.policies.size(), "predict_time: policy index out of range");
  const ScheduleCost c = price_schedule(time_model_of(cal, every), s, block_policy);
  TimePrediction t;
  t.step = c.total;
  t.fixed = c.fixed;
  t.forward = c.forward;
  t.recompute = c.recompute;
  t.backward = c.backward;
  t.free = c.free;
  t.stored_backwards = c.stored_backwards;
  t.replayed_backwards = c.replayed_backwards;
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
  return time_model_of(cal, calibration_indices(cal, policy_names));
}

}  // namespace remat::planner
