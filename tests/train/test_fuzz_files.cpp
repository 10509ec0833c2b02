// A seeded, bounded fuzz test of the JSON files remat reads: config.json (config_from_hf), plan files
// (plan_from_json), calibration files (parse_calibration) and checkpoint state (read_run_state).
// Valid files are mutated: bytes flipped, inserted or cut, the text truncated, a number replaced by an
// extreme (1e308, -1, 0, 2^64, 1e-320, ...) or by text JSON has no number for (NaN, 0x10, 1e999), a
// value given another type, a key dropped. Each result must load or be refused with a one-line
// remat::Error: never another exception, a crash or an abort. A loaded model config always passes
// validate() and the range checks (nothing absurd gets through).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/record.h"
#include "model/weights.h"
#include "planner/calibration.h"
#include "planner/budget.h"
#include "train/run_state.h"

using namespace remat;
using json = nlohmann::json;

namespace {

// Mutants per seed file: in-memory parsers run fast; a checkpoint state is read from disk.
constexpr int kMutantsPerSeed = 1500, kStateMutants = 400;

// Extremes a number may be replaced with, as JSON text (some are not JSON at all).
const std::vector<std::string> kExtremes = {
    "1e308", "-1e308", "1e-320", "-1", "0", "-0", "0.5", "1e18", "-1e18", "4294967296", "2147483648",
    "9223372036854775807", "9223372036854775808", "-9223372036854775809", "18446744073709551615",
    "18446744073709551616", "1e300", "1e-45", "3.4e38", "3.5e38", "NaN", "Infinity", "-Infinity", "1e999",
    "0x10", "010", "\"12\"", "true", "null", "[]", "{}", "[1,2]", "\"\"", "1.0"};

// Every path (json pointer) to a leaf of `j`.
void leaves(const json& j, const std::string& at, std::vector<std::string>& out) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) leaves(v, at + "/" + k, out);
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) leaves(j[i], at + "/" + std::to_string(i), out);
  } else {
    out.push_back(at);
  }
}

// One mutant of `seed` (valid JSON text).
std::string mutate(const std::string& seed, std::mt19937_64& rng) {
  auto pick = [&](size_t n) { return size_t(rng() % n); };
  const json j = json::parse(seed);
  std::vector<std::string> paths;
  leaves(j, "", paths);
  switch (pick(6)) {
    case 0: {  // a leaf replaced by an extreme, as raw text
      json m = j;
      m[json::json_pointer(paths[pick(paths.size())])] = "@@X@@";
      std::string s = m.dump(1);
      s.replace(s.find("\"@@X@@\""), 7, kExtremes[pick(kExtremes.size())]);
      return s;
    }
    case 1: {  // two leaves at once
      json m = j;
      for (int k = 0; k < 2; ++k) {
        const std::string& e = kExtremes[pick(kExtremes.size())];
        m[json::json_pointer(paths[pick(paths.size())])] = json::accept(e) ? json::parse(e) : json(e);
      }
      return m.dump();
    }
    case 2: {  // a key dropped, or an unknown one added
      json m = j;
      json::json_pointer p(paths[pick(paths.size())]);
      if (pick(2) == 0 && !p.empty()) {
        const std::string last = p.back();
        json::json_pointer parent = p.parent_pointer();
        if (m[parent].is_object()) m[parent].erase(last);
      } else {
        m["unknown_" + std::to_string(pick(100))] = 1;
      }
      return m.dump();
    }
    case 3: {  // bytes flipped
      std::string s = seed;
      for (size_t k = 0, n = 1 + pick(4); k < n; ++k) s[pick(s.size())] ^= char(1 + pick(255));
      return s;
    }
    case 4: {  // truncated
      return seed.substr(0, pick(seed.size()));
    }
    default: {  // a digit inserted into a number (a huge or wrong-typed value)
      std::string s = seed;
      for (int tries = 0; tries < 20; ++tries) {
        const size_t at = pick(s.size());
        if (std::isdigit(static_cast<unsigned char>(s[at]))) {
          s.insert(at, std::string(1 + pick(12), char('0' + pick(10))));
          break;
        }
      }
      return s;
    }
  }
}

struct Outcome {
  int loaded = 0, refused = 0;
};

// Runs `load` on `mutants` mutants of each seed: it loads (returning the model config it read)
// or throws remat::Error; anything else fails the test.
Outcome fuzz(const std::vector<std::string>& seeds, uint64_t seed_value,
             const std::function<ModelConfig(const std::string&)>& load, int mutants = kMutantsPerSeed) {
  std::mt19937_64 rng(seed_value);
  Outcome o;
  for (const std::string& s : seeds) {
    EXPECT_NO_THROW((void)load(s)) << "the seed itself must load";
    for (int i = 0; i < mutants; ++i) {
      const std::string text = mutate(s, rng);
      try {
        const ModelConfig c = load(text);
        EXPECT_NO_THROW(c.validate()) << text;
        EXPECT_LE(c.L, ConfigLimits::kMaxLayers) << text;
        EXPECT_TRUE(c.rope_theta >= ConfigLimits::kMinRopeTheta && c.rope_theta <= ConfigLimits::kMaxRopeTheta) << text;
        EXPECT_TRUE(c.norm_eps >= ConfigLimits::kMinNormEps && c.norm_eps <= ConfigLimits::kMaxNormEps) << text;
        ++o.loaded;
      } catch (const Error& e) {
        const std::string w = e.what();
        EXPECT_FALSE(w.empty());
        EXPECT_EQ(w.find('\n'), std::string::npos) << w;
        ++o.refused;
      } catch (const std::exception& e) {
        ADD_FAILURE() << "not a remat::Error: " << e.what() << "\n" << text;
      }
    }
  }
  std::printf("  %d mutants: %d loaded, %d refused\n", o.loaded + o.refused, o.loaded, o.refused);
  return o;
}

ModelConfig small(Arch arch) {
  ModelConfig c;
  c.arch = arch;
  c.L = 2, c.C = 64, c.NH = 4, c.T = 32, c.V = 256;
  if (arch == Arch::Llama) c.KVH = 2, c.rope_theta = 500000.0f, c.norm_eps = 1e-6f;
  return c;
}

TEST(FuzzFiles, ConfigJson) {
  const std::vector<std::string> seeds = {hf_config(small(Arch::GPT2)).dump(1), hf_config(small(Arch::Llama)).dump(1)};
  const Outcome o = fuzz(seeds, 11, [](const std::string& text) {
    json j;
    try {
      j = json::parse(text);
    } catch (const json::exception&) {
      throw Error("config", "not JSON", "");
    }
    return config_from_hf(j, "config.json");
  });
  EXPECT_GT(o.refused, 0);
  EXPECT_GT(o.loaded, 0);
}

TEST(FuzzFiles, PlanFile) {
  std::vector<std::string> seeds;
  for (Arch a : {Arch::GPT2, Arch::Llama}) {
    PlanTarget t;
    t.cfg = small(a);
    t.batch = 2, t.micro = 2, t.T = 16;
    seeds.push_back(plan_to_json(plan_for_budget(t, size_t(1) << 30)).dump(1));
  }
  const Outcome o = fuzz(seeds, 12, [](const std::string& text) {
    json j;
    try {
      j = json::parse(text);
    } catch (const json::exception&) {
      throw Error("plan", "not JSON", "");
    }
    return plan_from_json(j, "plan.json").cfg;
  });
  EXPECT_GT(o.refused, 0);
  EXPECT_GT(o.loaded, 0);
}

TEST(FuzzFiles, CalibrationFile) {
  planner::Calibration c;
  c.cfg = small(Arch::Llama);
  c.B = 2, c.T = 16, c.threads = 2, c.repeats = 3;
  c.embed_forward = 1e-4, c.head_forward = 2e-4, c.head_backward = 4e-4, c.embed_backward = 1e-4, c.rest = 3e-4;
  c.forward_pass = 1e-3, c.recompute_pass = 1.1e-3, c.free_checkpoint = 1e-6;
  c.policies = {{"none", 1e-3, 1.2e-3, 2e-3, 2.1e-3}, {"selective", 9e-4, 1e-3, 2.2e-3, 2.3e-3}};
  const Outcome o = fuzz({planner::calibration_json(c)}, 13,
                         [](const std::string& text) { return planner::parse_calibration(text, "cal.json").cfg; });
  EXPECT_GT(o.refused, 0);
  EXPECT_GT(o.loaded, 0);
}

TEST(FuzzFiles, CheckpointState) {
  const std::filesystem::path dir = std::filesystem::path(testing::TempDir()) / "remat_fuzz_state";
  std::filesystem::create_directories(dir);
  RunConfig rc;
  rc.model = small(Arch::GPT2);
  rc.steps = 10, rc.batch = 2, rc.micro_batch = 2, rc.seq = 16;
  CheckpointIdentity id;
  id.run = "0123456789abcdef0123456789abcdef";
  id.train_data = {1000, "0123456789abcdef"};
  id.weights = id.adam_m = id.adam_v = {4096, "fedcba9876543210"};
  const json state = {{"format", "remat-checkpoint"}, {"version", kCheckpointVersion}, {"step", 3}, {"skipped", 0},
                      {"identity", record::to_json(id)}, {"options", run_config_json(rc)}};
  const Outcome o = fuzz({state.dump(1)}, 14, [&](const std::string& text) {
    std::ofstream((dir / "state.json").string(), std::ios::binary) << text;
    return read_run_state(dir.string()).options.model;
  }, kStateMutants);
  EXPECT_GT(o.refused, 0);
  EXPECT_GT(o.loaded, 0);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace
