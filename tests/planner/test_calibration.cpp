// The calibrated time model (planner/calibration.h) without timing anything: the file round-trips
// and refuses what is corrupt or made for another run; the predictor reproduces hand-computed step
// times of a synthetic calibration (every term a distinct known value) for several schedules; store
// everything costs exactly its first-pass terms; and the DP's TimeModel prices every schedule as the
// predictor does.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "planner/calibration.h"
#include "test_util.h"

using namespace remat;
using planner::Calibration;
using remat::testing_util::error_of;

namespace {

bool has(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

ModelConfig model4() {
  ModelConfig c;
  c.L = 4;
  c.C = 32;
  c.NH = 2;
  c.T = 16;
  c.V = 64;
  c.dropout = 0.1f;
  return c;
}

// Every term a distinct value, so that any term priced in the wrong place shows. Binary fractions
// and small integers: the sums below are exact in double.
Calibration synthetic() {
  Calibration c;
  c.cfg = model4();
  c.B = 2;
  c.T = 16;
  c.threads = 2;
  c.repeats = 3;
  c.embed_forward = 1;
  c.head_forward = 2;
  c.head_backward = 4;
  c.embed_backward = 8;
  c.rest = 16;
  c.forward_pass = 100;
  c.recompute_pass = 200;
  c.free_checkpoint = 0.5;
  c.policies = {{"none", 1000, 2000, 10000, 20000}, {"selective", 3000, 5000, 30000, 50000}};
  return c;
}

Schedule sched(const std::string& s, bool recompute_last, bool replay_internals = false) {
  return make_schedule(parse_strategy(s, 4, recompute_last, replay_internals), 4);
}

class CalibrationFile : public remat::testing_util::TempDirTest {};

}  // namespace

TEST_F(CalibrationFile, RoundTripsEveryTerm) {
  Calibration c = synthetic();
  c.cfg.attention = autograd::AttentionKind::Flash;
  c.cfg.arch = Arch::Llama;
  c.cfg.KVH = 1;
  c.cfg.rope_theta = 500000.0f;
  c.cfg.norm_eps = 1e-6f;
  c.forward_pass = 0.0123456789012345;  // not a binary fraction: the text must keep every digit
  c.clock = "cpu";
  planner::save_calibration(c, p("cal.json"));
  const Calibration r = planner::load_calibration(p("cal.json"));
  EXPECT_EQ(r, c) << "every field, compared as a struct";
  EXPECT_EQ(planner::calibration_json(r), planner::calibration_json(c));
  EXPECT_EQ(r.forward_pass, c.forward_pass);
  EXPECT_EQ(r.cfg.attention, autograd::AttentionKind::Flash);
  EXPECT_EQ(r.cfg.arch, Arch::Llama);
  EXPECT_EQ(r.cfg.rope_theta, c.cfg.rope_theta);
  EXPECT_EQ(r.cfg.norm_eps, c.cfg.norm_eps);
  EXPECT_EQ(r.cfg.dropout, c.cfg.dropout);
  EXPECT_EQ(r.B, 2);
  EXPECT_EQ(r.T, 16);
  EXPECT_EQ(r.threads, 2);
  ASSERT_EQ(r.policies.size(), 2u);
  EXPECT_EQ(r.policies[1].name, "selective");
  EXPECT_EQ(r.policies[1].backward_replayed, 50000);
  EXPECT_EQ(r.rest, 16);
  // It matches the run it was made for, and nothing else.
  EXPECT_EQ(r.clock, "cpu");
  EXPECT_NO_THROW(planner::check_calibration(r, c.cfg, 2, 16, 2, "cpu", "cal.json"));
  // Small: a few hundred bytes per policy.
  EXPECT_LT(planner::calibration_json(r).size(), 2000u);
}

TEST(Calibration, RefusesAnotherRun) {
  const Calibration c = synthetic();
  const ModelConfig cfg = c.cfg;
  auto refused = [&](const ModelConfig& m, int64_t B, int64_t T, int threads) {
    return error_of([&] { planner::check_calibration(c, m, B, T, threads, "wall", "cal.json"); });
  };
  ModelConfig m = cfg;
  m.L = 5;
  std::string e = refused(m, 2, 16, 2);
  EXPECT_TRUE(has(e, "[calibration]") && has(e, "measured for another run") && has(e, "model.layers 4 (file) vs 5 (this run)") &&
              has(e, "remat calibrate"))
      << e;
  m = cfg;
  m.attention = autograd::AttentionKind::Flash;
  EXPECT_TRUE(has(refused(m, 2, 16, 2), "attention")) << refused(m, 2, 16, 2);
  m = cfg;
  m.dropout = 0;
  EXPECT_TRUE(has(refused(m, 2, 16, 2), "dropout")) << refused(m, 2, 16, 2);
  EXPECT_TRUE(has(refused(cfg, 4, 16, 2), "batch 2 (file) vs 4 (this run)")) << refused(cfg, 4, 16, 2);
  EXPECT_TRUE(has(refused(cfg, 2, 8, 2), "seq 16 (file) vs 8 (this run)")) << refused(cfg, 2, 8, 2);
  EXPECT_TRUE(has(refused(cfg, 2, 16, 1), "threads 2 (file) vs 1 (this run)")) << refused(cfg, 2, 16, 1);
  // A calibration measured in fp32 prices no bf16 run, and every difference is named in one line.
  m = cfg;
  m.precision = DType::BF16;
  e = refused(m, 4, 16, 1);
  EXPECT_TRUE(has(e, "model.precision \"f32\" (file) vs \"bf16\" (this run)") && has(e, "batch 2 (file) vs 4") &&
              has(e, "threads 2 (file) vs 1") && e.find('\n') == std::string::npos)
      << e;
  e = error_of([&] { planner::check_calibration(c, cfg, 2, 16, 2, "cpu", "cal.json"); });
  EXPECT_TRUE(has(e, "clock \"wall\" (file) vs \"cpu\" (this run)")) << e;
  e = error_of([&] { c.policy_index("gelu"); });
  EXPECT_TRUE(has(e, "'gelu' was not calibrated") && has(e, "none, selective")) << e;
}

TEST(Calibration, RefusesCorruptFiles) {
  const std::string good = planner::calibration_json(synthetic());
  auto refused = [](const std::string& text) {
    return error_of([&] { planner::parse_calibration(text, "cal.json"); });
  };
  EXPECT_EQ(refused(good), "<no remat::Error thrown>");
  auto edited = [&](const std::function<void(nlohmann::json&)>& f) {
    nlohmann::json j = nlohmann::json::parse(good);
    f(j);
    return refused(j.dump());
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {refused(""), "not valid JSON"},
      {refused(good.substr(0, good.size() / 2)), "not valid JSON"},
      {refused("[1, 2]"), "not a JSON object"},
      {refused("{}"), "\"format\""},
      {edited([](auto& j) { j["format"] = "remat-plan"; }), "\"format\""},
      {edited([](auto& j) { j.erase("version"); }), "\"version\" is missing"},
      {edited([](auto& j) { j["version"] = 1; }), "calibration version 1, this remat reads version 2 (version 1 does not record the precision"},
      {edited([](auto& j) { j["version"] = 3; }), "calibration version 3, this remat reads version 2"},
      {edited([](auto& j) { j["version"] = "1"; }), "\"version\" is missing or not an integer"},
      {edited([](auto& j) { j.erase("rest"); }), "\"rest\" is missing"},
      {edited([](auto& j) { j["forward_pass"] = -1.0; }), "a time is negative"},
      {edited([](auto& j) { j["policies"][1]["backward_replayed"] = -1.0; }), "a time is negative"},
      {edited([](auto& j) { j["recompute_pass"] = "fast"; }), "\"recompute_pass\" must be a finite number"},
      {edited([](auto& j) { j["policies"][0]["backward_stored"] = nullptr; }), "\"policies[0].backward_stored\" must be"},
      {edited([](auto& j) { j["policies"] = nlohmann::json::array(); }), "\"policies\" must be a non-empty list"},
      {edited([](auto& j) { j["policies"][1]["name"] = "none"; }), "'none' appears twice"},
      {edited([](auto& j) { j["model"]["arch"] = "bert"; }), "\"model.arch\" must be one of gpt2, llama"},
      {edited([](auto& j) { j["model"]["attention"] = "sparse"; }), "\"model.attention\" must be one of naive, flash"},
      {edited([](auto& j) { j["model"]["precision"] = "fp16"; }), "\"model.precision\" must be one of f32, bf16"},
      {edited([](auto& j) { j["model"].erase("precision"); }), "\"model.precision\" is missing"},
      {edited([](auto& j) { j["model"]["layers"] = 0; }), "its model is invalid"},
      {edited([](auto& j) { j["threads"] = 0; }), "\"threads\" must be at least 1"},
      {edited([](auto& j) { j["speed"] = 1; }), "\"speed\" is not a field this remat knows"},
      {edited([](auto& j) { j.erase("model"); }), "\"model\" is missing"},
      {edited([](auto& j) { j["clock"] = "tsc"; }), "\"clock\" must be \"wall\" or \"cpu\""},
  };
  for (const auto& [msg, needle] : cases) {
    EXPECT_TRUE(has(msg, "[calibration]")) << msg;
    EXPECT_TRUE(has(msg, needle)) << "expected '" << needle << "' in: " << msg;
    EXPECT_TRUE(has(msg, "(hint: ")) << msg;
  }
}

TEST_F(CalibrationFile, MissingFileIsAnIoError) {
  const std::string e = error_of([&] { planner::load_calibration(p("absent.json")); });
  EXPECT_TRUE(has(e, "absent.json")) << e;
}

// Hand-computed step times: F fixed, f/r pass forward and replay, S/R store forward and replay,
// Bs/Br backward of stored and replayed internals, x a free.
TEST(CalibrationPredictor, ReproducesHandComputedSchedules) {
  const Calibration c = synthetic();
  const double F = 1 + 2 + 4 + 8 + 16, f = 100, r = 200, x = 0.5;
  const double S = 1000, R = 2000, Bs = 10000, Br = 20000;            // policy none
  const double S1 = 3000, R1 = 5000, Bs1 = 30000, Br1 = 50000;        // policy selective
  EXPECT_EQ(c.fixed(), F);

  // block, last block stored: three blocks checkpointed, each replayed once with its internals.
  planner::TimePrediction t = planner::predict_time(c, sched("block", false));
  EXPECT_EQ(t.step, F + 3 * f + S + Bs + 3 * (R + Br + x));
  EXPECT_EQ(t.stored_backwards, 1);
  EXPECT_EQ(t.replayed_backwards, 3);
  EXPECT_EQ(t.free, 3 * x);
  // block --recompute-last: every block.
  EXPECT_EQ(planner::predict_time(c, sched("block", true)).step, F + 4 * f + 4 * (R + Br + x));
  // sqrt = two segments of 2, both replayed, boundaries mode: per segment one pass replay, two
  // replays with internals, two backwards, one free.
  t = planner::predict_time(c, sched("sqrt", true));
  EXPECT_EQ(t.step, F + 4 * f + 2 * (r + 2 * R + 2 * Br + x));
  EXPECT_EQ(t.recompute, 2 * (r + 2 * R));
  // ... in internals mode: no pass replay.
  EXPECT_EQ(planner::predict_time(c, sched("sqrt", true, true)).step, F + 4 * f + 2 * (2 * R + 2 * Br + x));
  // all, last block stored: block i < 3 is rebuilt from x0 through i pass replays.
  EXPECT_EQ(planner::predict_time(c, sched("all", false)).step, F + 3 * f + S + Bs + (0 + 1 + 2) * r + 3 * (R + Br) + x);
  // Policies per block: selective on blocks 1 and 3 of store-everything, and on block 0 of block.
  EXPECT_EQ(planner::predict_time(c, sched("none", false), {0, 1, 0, 1}).step, F + 2 * (S + Bs) + 2 * (S1 + Bs1));
  EXPECT_EQ(planner::predict_time(c, sched("block", false), {1, 0, 0, 0}).step,
            F + 3 * f + S + Bs + 2 * (R + Br + x) + (R1 + Br1 + x));
  // segments:1,3 with the last segment stored under selective.
  EXPECT_EQ(planner::predict_time(c, sched("segments:1,3", false), {0, 1, 1, 1}).step,
            F + f + 3 * (S1 + Bs1) + (R + Br + x));
}

TEST(CalibrationPredictor, StoreEverythingIsTheSumOfFirstPassTerms) {
  const Calibration c = synthetic();
  for (int p = 0; p < 2; ++p) {
    const auto& q = c.policies[size_t(p)];
    const planner::TimePrediction t = planner::predict_time(c, sched("none", false), std::vector<int>(4, p));
    EXPECT_EQ(t.step, c.embed_forward + c.head_forward + c.head_backward + c.embed_backward + c.rest +
                          4 * (q.forward_store + q.backward_stored));
    EXPECT_EQ(t.recompute, 0);
    EXPECT_EQ(t.free, 0);
    EXPECT_EQ(t.replayed_backwards, 0);
  }
}

// The DP's TimeModel prices every schedule exactly as the predictor does, fixed terms included,
// whatever the order of the DP's policies; the DRAM premium is the first pass's extra per stored block.
TEST(CalibrationPredictor, DpTimeModelIsThePredictor) {
  const Calibration c = synthetic();
  const planner::TimeModel tm = planner::calibrated_time(c, {"selective", "none"});  // DP order differs
  const std::vector<int> dp_pol{1, 0, 1, 0}, cal_pol{0, 1, 0, 1};
  for (bool last : {false, true})
    for (bool internals : {false, true})
      for (const char* s : {"none", "block", "sqrt", "uniform:1", "uniform:3", "all", "segments:1,3"}) {
        const Schedule sc = sched(s, last, internals);
        EXPECT_EQ(planner::schedule_time(tm, sc, dp_pol), planner::predict_time(c, sc, cal_pol).step)
            << s << (internals ? " internals" : "") << (last ? " last" : "");
      }
  // none against block --recompute-last with one policy: the difference is the premium, the pass
  // replay's cost and the free, per block.
  for (int p = 0; p < 2; ++p) {
    const std::vector<int> pol(4, p);
    const double none = planner::predict_time(c, sched("none", false), pol).step;
    const double block = planner::predict_time(c, sched("block", true), pol).step;
    EXPECT_EQ(none - block, 4 * (planner::store_premium(c, p) - c.recompute_pass - c.free_checkpoint));
  }
  const std::string e = error_of([&] { planner::calibrated_time(c, {"none", "norms"}); });
  EXPECT_TRUE(has(e, "'norms' was not calibrated")) << e;
}

// An optimizer step of several micro-batches pays the rest (the optimizer) once.
TEST(CalibrationPredictor, AccumulationPaysTheRestOnce) {
  const Calibration c = synthetic();
  const planner::TimePrediction t = planner::predict_time(c, sched("block", false));
  EXPECT_EQ(planner::optimizer_step_seconds(c, t, 1), t.step);
  EXPECT_EQ(planner::optimizer_step_seconds(c, t, 3), 3 * t.step - 2 * c.rest);
}
