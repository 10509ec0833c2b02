// `remat bench` predicts with the planner and nothing else: each row's FLOP overhead is the
// planner's StepPlan::compute for that strategy and policy, its calibrated overhead (--calibration,
// with or without --time-model) is plan_seconds against none's, and --time-model's "budget plan" is
// the DP's own plan (optimal_plan) of the same candidates and calibration at the same budget. The
// planner's side is computed here in-process from the calibration file the bench read. Tiny models;
// no timing is asserted.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/record.h"
#include "planner/budget.h"
#include "planner/calibration.h"
#include "run.h"

namespace {

using namespace remat_cli_test;
using nlohmann::json;
using remat::autograd::AttentionKind;

bool has(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

RunResult ok(const std::vector<std::string>& args) {
  RunResult r = run_remat(args);
  EXPECT_TRUE(r.exited() && r.exit_code == 0) << r.describe();
  return r;
}

// The tiny preset (L2 C64 NH4 T64) at batch 2, as the bench runs it.
constexpr int64_t kBatch = 2, kSeq = 64;
remat::PlanTarget tiny_target() {
  remat::PlanTarget t;
  t.cfg = remat::preset("tiny");
  t.batch = t.micro = kBatch;
  t.T = kSeq;
  return t;
}
remat::StrategySpec strategy(const std::string& name) { return remat::parse_strategy(name, 2, false); }

// A calibration of the tiny preset at batch 2, made by `remat calibrate` (as the bench's children
// run: one thread).
std::string calibrate(TempDir& d, const std::string& policies) {
  const std::string file = d / ("cal-" + policies + ".json");
  ok({"calibrate", "--preset", "tiny", "--batch", "2", "--out", file, "--repeats", "1", "--untimed-rounds", "1", "--policies",
      policies});
  return file;
}

TEST(BenchPlanner, RowsAreThePlannersPlansPricedByFlopsAndTheCalibration) {
  TempDir d;
  const std::string file = calibrate(d, "none,selective,gelu");
  const remat::planner::Calibration cal = remat::planner::load_calibration(file);
  const json rows = json::parse(ok({"bench", "--preset", "tiny", "--batch", "2", "--recompute", "none", "block", "sqrt",
                                    "selective", "block+gelu", "--calibration", file, "--timed-steps", "1", "--untimed-steps", "0",
                                    "--json"})
                                    .out);
  ASSERT_EQ(rows.size(), 5u) << rows.dump(1);

  // The planner: the calibrated candidates of the presets the file covers, and (FLOPs alone) every
  // preset of the model; the bench takes only the rows' presets, and the prices are the same.
  remat::PlanTarget t = tiny_target();
  t.calibration = cal;
  const remat::Candidates cc = remat::make_candidates(t.cfg, kBatch, kSeq, &cal, {}, {"selective", "gelu"});
  const remat::Candidates c = remat::make_candidates(t.cfg, kBatch, kSeq, nullptr);
  ASSERT_EQ(c.problem.policy_names, (std::vector<std::string>{"none", "selective", "gelu", "norms"}));
  const remat::StepPlan none = remat::price_strategy(cc, strategy("none"), "none", t);
  const std::vector<std::pair<std::string, std::string>> asked{
      {"none", "none"}, {"block", "none"}, {"sqrt", "none"}, {"none", "selective"}, {"block", "gelu"}};
  for (size_t i = 0; i < rows.size(); ++i) {
    const json& r = rows[i];
    SCOPED_TRACE(r.dump());
    const remat::StepPlan p = remat::price_strategy(cc, strategy(asked[i].first), asked[i].second, t);
    const remat::StepPlan flops_only = remat::price_strategy(c, strategy(asked[i].first), asked[i].second, t);
    EXPECT_DOUBLE_EQ(r.at("overhead_predicted").get<double>(), p.compute.overhead());
    EXPECT_DOUBLE_EQ(r.at("overhead_predicted").get<double>(), flops_only.compute.overhead());
    EXPECT_EQ(r.at("predicted_activation_bytes").get<size_t>(), p.activation_peak);
    ASSERT_TRUE(p.seconds && none.seconds);
    EXPECT_DOUBLE_EQ(r.at("overhead_calibrated").get<double>(), *p.seconds / *none.seconds);
    EXPECT_EQ(r.at("calibration"), file);
    // One time model: the ad-hoc one (none's per-block forward time per replay) is gone.
    EXPECT_FALSE(r.contains("overhead_predicted_time"));
  }
  EXPECT_DOUBLE_EQ(rows[0].at("overhead_calibrated").get<double>(), 1.0);
  // Selective and gelu are priced by their own calibrated terms, not by the FLOP count.
  EXPECT_NE(rows[3].at("overhead_calibrated").get<double>(), rows[3].at("overhead_predicted").get<double>());

  // The table: the calibrated column with the file named; without a calibration, no such column.
  const RunResult tab = ok({"bench", "--preset", "tiny", "--batch", "2", "--recompute", "none", "block", "--calibration",
                            file, "--timed-steps", "1", "--untimed-steps", "0"});
  EXPECT_TRUE(has(tab.out, "\ncalibration " + file + ": ")) << tab.out;
  EXPECT_TRUE(has(tab.out, " ovh FLOP   ovh cal ")) << tab.out;
  EXPECT_FALSE(has(tab.out, "t-cal")) << tab.out;
  const RunResult plain = ok({"bench", "--preset", "tiny", "--batch", "2", "--recompute", "none", "--timed-steps", "1",
                              "--untimed-steps", "0"});
  EXPECT_FALSE(has(plain.out, "ovh cal")) << plain.out;
  EXPECT_FALSE(has(plain.out, "t-cal")) << plain.out;
}

// Rows of another attention kernel are the planner's candidates of that kernel ("flash", "flash+gelu").
TEST(BenchPlanner, FlashRowsAreTheFlashCandidates) {
  const json rows = json::parse(ok({"bench", "--preset", "tiny", "--batch", "2", "--recompute", "none", "flash+block",
                                    "flash+block+gelu", "--timed-steps", "1", "--untimed-steps", "0", "--json"})
                                    .out);
  ASSERT_EQ(rows.size(), 3u);
  const remat::PlanTarget t = tiny_target();
  const remat::Candidates c =
      remat::make_candidates(t.cfg, kBatch, kSeq, nullptr, {AttentionKind::Naive, AttentionKind::Flash});
  const std::vector<std::pair<std::string, std::string>> asked{{"none", "none"}, {"block", "flash"}, {"block", "flash+gelu"}};
  for (size_t i = 0; i < rows.size(); ++i) {
    SCOPED_TRACE(rows[i].dump());
    const remat::StepPlan p = remat::price_strategy(c, strategy(asked[i].first), asked[i].second, t);
    EXPECT_EQ(rows[i].at("attention"), i == 0 ? "naive" : "flash");
    EXPECT_DOUBLE_EQ(rows[i].at("overhead_predicted").get<double>(), p.compute.overhead());
    EXPECT_EQ(rows[i].at("predicted_activation_bytes").get<size_t>(), p.activation_peak);
    EXPECT_EQ(rows[i].at("peak_activation_bytes").get<size_t>(), p.activation_peak);  // and it ran as priced
  }
}

TEST(BenchPlanner, TimeModelBudgetPlanIsTheDpsPlanOfTheSameCalibration) {
  TempDir d;
  const std::string file = calibrate(d, "none,selective");
  const remat::planner::Calibration cal = remat::planner::load_calibration(file);
  const json rows = json::parse(ok({"bench", "--time-model", "--preset", "tiny", "--batch", "2", "--calibration", file,
                                    "--timed-steps", "1", "--untimed-steps", "0", "--json"})
                                    .out);
  ASSERT_EQ(rows.size(), 6u) << rows.dump(1);

  // The candidates --time-model plans with (none and selective), priced by the same calibration.
  remat::PlanTarget t = tiny_target();
  t.calibration = cal;
  const remat::Candidates c = remat::make_candidates(t.cfg, kBatch, kSeq, &cal, {}, {"selective"});
  const remat::StepPlan none = remat::price_strategy(c, strategy("none"), "none", t);
  const remat::StepPlan block = remat::price_strategy(c, strategy("block"), "none", t);
  const size_t budget = (none.activation_peak + block.activation_peak) / 2;
  const remat::StepPlan dp = remat::price_plan(c, remat::planner::optimal_plan(c.problem, budget), t);
  const std::vector<remat::StepPlan> plans{none,
                                           block,
                                           remat::price_strategy(c, strategy("sqrt"), "none", t),
                                           remat::price_strategy(c, strategy("none"), "selective", t),
                                           dp,
                                           none};
  auto flops = [](const remat::StepPlan& p) { return p.compute.fwd + p.compute.bwd + p.compute.recompute; };
  for (size_t i = 0; i < rows.size(); ++i) {
    const json& r = rows[i];
    SCOPED_TRACE(r.dump());
    EXPECT_EQ(r.at("schedule"), remat::record::to_json(plans[i].schedule));
    EXPECT_EQ(r.at("block_policy").get<std::vector<std::string>>(), plans[i].block_policy);
    EXPECT_EQ(r.at("predicted_activation_bytes").get<size_t>(), plans[i].activation_peak);
    EXPECT_DOUBLE_EQ(r.at("overhead_flops").get<double>(), flops(plans[i]) / flops(none));
    EXPECT_DOUBLE_EQ(r.at("overhead_calibrated").get<double>(), *plans[i].seconds / *none.seconds);
  }
  EXPECT_EQ(rows[4].at("row"), "budget plan");
  EXPECT_LE(dp.activation_peak, budget);
}

TEST(BenchPlanner, CalibrationWithoutTimeModelIsCheckedBeforeAnyWork) {
  TempDir d;
  const std::string file = calibrate(d, "none,selective");
  const std::vector<std::string> bench{"bench", "--preset", "tiny", "--batch", "2", "--timed-steps", "1", "--untimed-steps", "0"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = bench;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  // Another model, batch or thread count than the file's: named, nothing run.
  RunResult r = run_remat(with({"--calibration", file, "--layers", "3"}));
  check_user_error(r, 1, {"[calibration]", "model.layers 2 (file) vs 3 (this run)"});
  EXPECT_EQ(r.out, "");
  check_user_error(run_remat(with({"--calibration", file, "--micro-batch", "1"})), 1, {"batch 2 (file) vs 1 (this run)"});
  check_user_error(run_remat(with({"--calibration", file, "--threads", "2"})), 1, {"threads 1 (file) vs 2 (this run)"});
  // One model, one file.
  check_user_error(run_remat(with({"--calibration", file, file})), 1,
                   {"[bench]", "2 calibration files for one model", "--time-model --configs"});
  // A row of a policy the file did not calibrate, or of another kernel than the file's.
  r = run_remat(with({"--calibration", file, "--recompute", "none", "block+gelu"}));
  check_user_error(r, 1, {"[calibration]", "'gelu' was not calibrated"});
  EXPECT_EQ(r.out, "");
  r = run_remat(with({"--calibration", file, "--recompute", "none", "flash+block"}));
  check_user_error(r, 1, {"[bench]", "flash attention beside naive", "prices one kernel", "drop --calibration"});
  EXPECT_EQ(r.out, "");
}

}  // namespace
