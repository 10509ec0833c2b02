// The run as one typed value, end to end through the command line: a plan file, a resume folder
// and a calibration carry every field of the run that they are for (the precision, the fp32
// residual stream, a plan's kernels per block, the learning-rate schedule), and a run that differs
// from them is refused in one line naming each field. Each case failed before the run had one
// typed value with one codec per file.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <algorithm>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "run.h"

namespace {

using namespace remat_cli_test;
using nlohmann::json;

RunResult ok(const std::vector<std::string>& args) {
  const RunResult r = run_remat(args);
  EXPECT_TRUE(r.exited() && r.exit_code == 0) << r.describe();
  return r;
}
bool has(const std::string& s, const std::string& n) { return s.find(n) != std::string::npos; }
std::vector<std::string> cat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
const std::vector<std::string> kQuiet{"--eval-every", "0", "--sample-tokens", "0", "--no-progress"};

// The `use:` line remat plan prints, as arguments (without "remat").
std::vector<std::string> use_line(const std::string& out) {
  std::smatch m;
  EXPECT_TRUE(std::regex_search(out, m, std::regex("\nuse: remat ([^\n]*)"))) << out;
  std::vector<std::string> args;
  std::istringstream s(m[1].str());
  for (std::string w; s >> w;) args.push_back(w);
  return args;
}

// A bf16 plan, pasted as its use: line, trains in bf16, and its whole step is measured equal to the
// plan's prediction, to the byte (GPT-2, and LLaMA with --fp32-residual within the budget it was
// planned for). trace --plan and bench --plan run it in bf16 too; without --precision bf16 it is
// refused naming the field.
TEST(RunDescription, Bf16PlanTrainsInBf16ToTheBytePlanned) {
  TempDir d;
  for (const std::vector<std::string> model :
       {std::vector<std::string>{"--layers", "2", "--channels", "64", "--heads", "4", "--seq", "64", "--batch", "4"},
        std::vector<std::string>{"--preset", "llama-tiny", "--seq", "64", "--batch", "4", "--fp32-residual"}}) {
    SCOPED_TRACE(model[0] + " " + model[1]);
    const std::string file = d / ("plan" + model[1] + ".json");
    const RunResult p = ok(cat(cat({"plan", "--precision", "bf16"}, model), {"--step-budget", "20MiB", "--out", file}));
    const json plan = json::parse(slurp(file));
    EXPECT_EQ(plan["model"]["precision"], "bf16");
    EXPECT_EQ(plan["model"]["fp32_residual"], model.back() == "--fp32-residual");
    const size_t predicted = plan["predicted"]["peak_total_bytes"].get<size_t>();
    EXPECT_LE(predicted, size_t(20) << 20);

    const std::string report = d / "report.json";
    const RunResult t = ok(cat(cat(use_line(p.out), kQuiet), {"--steps", "1", "--report-json", report}));
    EXPECT_TRUE(has(t.out, "whole step: predicted = measured, to the byte")) << t.out;
    const json r = json::parse(slurp(report));
    EXPECT_EQ(r["precision"], "bf16");
    EXPECT_EQ(r["fp32_residual"], model.back() == "--fp32-residual");
    EXPECT_EQ(r["peak_total_bytes"].get<size_t>(), predicted) << "measured whole step against the plan's prediction";
    EXPECT_EQ(r["peak_activation_bytes"], plan["predicted"]["peak_activation_bytes"]);

    std::vector<std::string> fp32 = cat(cat({"train"}, model), {"--plan", file, "--steps", "1"});
    fp32.erase(std::remove(fp32.begin(), fp32.end(), "--fp32-residual"), fp32.end());
    check_user_error(run_remat(fp32), 1, {"[plan]", "model.precision \"bf16\" (plan) vs \"f32\" (this run)"});

    const RunResult tr = ok(cat(cat({"trace", "--precision", "bf16"}, model), {"--plan", file}));
    std::smatch m;
    ASSERT_TRUE(std::regex_search(tr.out, m, std::regex("peak activation ([^\\n]*) measured, ([^\\n]*) predicted"))) << tr.out;
    EXPECT_EQ(m[1].str(), m[2].str()) << tr.out;
    const RunResult b = ok(cat(cat({"bench", "--precision", "bf16"}, model), {"--plan", file, "--timed-steps", "1", "--untimed-steps", "0", "--json"}));
    EXPECT_TRUE(has(b.out, "\"precision\": \"bf16\"")) << b.out;
  }
}

// A bf16 run resumes in bf16 (the checkpoint records the precision), bit-identical to the
// uninterrupted run, with no --precision on the resuming command line.
TEST(RunDescription, Bf16ResumeIsBitIdentical) {
  TempDir d;
  const std::vector<std::string> run{"train", "--preset", "tiny", "--seq", "32", "--batch", "4", "--precision", "bf16",
                                     "--dropout", "0.1", "--recompute", "block", "--lr-decay-steps", "6"};
  ok(cat(cat(run, kQuiet), {"--steps", "6", "--save", d / "full.safetensors"}));
  ok(cat(cat(run, kQuiet), {"--steps", "4", "--save-dir", d / "ck", "--save-every", "2"}));
  EXPECT_EQ(json::parse(slurp(d / "ck/step-000004/state.json"))["options"]["model"]["precision"], "bf16");
  const RunResult r = ok(cat({"train", "--resume", d / "ck", "--steps", "6", "--save", d / "resumed.safetensors"}, kQuiet));
  EXPECT_TRUE(has(r.out, "remat train: gpt2 L=2 C=64 NH=4 T=32 V=256 bf16,")) << r.out;
  EXPECT_EQ(slurp(d / "resumed.safetensors"), slurp(d / "full.safetensors")) << "final weights differ";
  check_user_error(run_remat(cat({"train", "--resume", d / "ck", "--steps", "6", "--precision", "fp32"}, kQuiet)), 1,
                   {"--precision fp32 (the checkpoint has bf16)"});
}

// A plan with a kernel per block resumes with its kernels (the checkpoint records the plan's
// schedule, policies and kernels per block), bit-identical to the uninterrupted run.
TEST(RunDescription, MixedKernelPlanResumesBitIdentically) {
  TempDir d;
  const std::string file = d / "mixed.json";
  const std::vector<std::string> model{"--preset", "llama-tiny", "--batch", "4", "--micro-batch", "2", "--dropout", "0.1"};
  const RunResult p = ok(cat(cat({"plan"}, model), {"--attention", "auto", "--step-budget", "3.79MiB", "--out", file}));
  ASSERT_EQ(json::parse(slurp(file))["block_attention"], json::array({"naive", "flash"})) << p.out;
  const std::vector<std::string> run = cat(cat(cat({"train"}, model), {"--plan", file, "--lr-decay-steps", "3"}), kQuiet);
  ok(cat(run, {"--steps", "3", "--save", d / "full.safetensors"}));
  ok(cat(run, {"--steps", "2", "--save-dir", d / "ck"}));
  const json state = json::parse(slurp(d / "ck/step-000002/state.json"));
  EXPECT_EQ(state["options"]["block_attention"], json::array({"naive", "flash"}));
  EXPECT_FALSE(state["options"]["schedule"].is_null());
  const RunResult r = ok(cat({"train", "--resume", d / "ck", "--steps", "3", "--save", d / "resumed.safetensors"}, kQuiet));
  EXPECT_TRUE(has(r.out, "attention per block: 0 naive, 1 flash")) << r.out;
  EXPECT_EQ(slurp(d / "resumed.safetensors"), slurp(d / "full.safetensors")) << "final weights differ";
}

// A longer --steps on resume would re-stretch the cosine decay: refused, naming the jump, unless
// --lr-decay-steps says what to do; keeping the decay gives the uninterrupted run's rates.
TEST(RunDescription, ResumeKeepsTheLearningRateSchedule) {
  TempDir d;
  const std::vector<std::string> run = cat({"train", "--preset", "tiny", "--seq", "32", "--batch", "2", "--warmup", "1"}, kQuiet);
  ok(cat(run, {"--steps", "4", "--save-dir", d / "ck"}));
  check_user_error(run_remat(cat({"train", "--resume", d / "ck", "--steps", "8"}, kQuiet)), 1,
                   {"--steps 8 changes the learning-rate schedule", "spans its 4 steps", "the learning rate of step 5 would be",
                    "--lr-decay-steps 4", "--lr-decay-steps 8"});
  ok(cat(run, {"--steps", "8", "--lr-decay-steps", "4", "--metrics-out", d / "full.jsonl"}));
  ok(cat({"train", "--resume", d / "ck", "--steps", "8", "--lr-decay-steps", "4", "--metrics-out", d / "m.jsonl"}, kQuiet));
  const auto a = split_lines(slurp(d / "full.jsonl")), b = split_lines(slurp(d / "m.jsonl"));
  ASSERT_EQ(a.size(), 8u);
  ASSERT_EQ(b.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(json::parse(a[4 + i])["lr"], json::parse(b[i])["lr"]) << "step " << 5 + i;
    EXPECT_EQ(json::parse(a[4 + i])["loss"], json::parse(b[i])["loss"]) << "step " << 5 + i;
  }
}

// A calibration measured in fp32 prices no bf16 plan.
TEST(RunDescription, Fp32CalibrationIsRefusedForABf16Plan) {
  TempDir d;
  const std::vector<std::string> model{"--preset", "tiny", "--seq", "32", "--batch", "2"};
  ok(cat(cat({"calibrate"}, model), {"--out", d / "cal.json", "--repeats", "1", "--untimed-rounds", "0"}));
  check_user_error(run_remat(cat(cat({"plan", "--precision", "bf16"}, model), {"--step-budget", "8MiB", "--calibration", d / "cal.json"})),
                   1, {"[calibration]", "model.precision \"f32\" (file) vs \"bf16\" (this run)"});
}

// --compare-none's baseline is store-everything, not the plan: its measured activation peak is
// store-everything's.
TEST(RunDescription, CompareNoneBaselineIsStoreEverything) {
  TempDir d;
  const std::string file = d / "plan.json";
  const std::vector<std::string> model{"--preset", "tiny", "--seq", "64", "--batch", "4"};
  ok(cat(cat({"plan"}, model), {"--step-budget", "4.5MiB", "--out", file}));
  ok(cat(cat(cat({"train"}, model), {"--plan", file, "--steps", "1", "--compare-none", "--report-json", d / "r.json"}), kQuiet));
  const json r = json::parse(slurp(d / "r.json"));
  ASSERT_FALSE(r["store_all_activation_bytes_measured"].is_null()) << r.dump(1);
  EXPECT_EQ(r["store_all_activation_bytes_measured"], r["store_all_activation_bytes_predicted"]);
  EXPECT_GT(r["store_all_activation_bytes_measured"].get<size_t>(), r["peak_activation_bytes"].get<size_t>())
      << "the baseline kept no more than the plan: it ran the plan";
}

}  // namespace

namespace {
// The use: line says the budget as it was typed, and --preset only when it was given.
TEST(RunDescription, UseLineCarriesTheBudgetAsTyped) {
  const RunResult p = ok({"plan", "--preset", "llama-tiny", "--batch", "4", "--micro-batch", "2", "--attention", "auto",
                          "--step-budget", "3.79MiB"});
  const std::vector<std::string> use = use_line(p.out);
  const std::string line = [&] {
    std::string s;
    for (const std::string& w : use) s += " " + w;
    return s;
  }();
  EXPECT_TRUE(has(line, " --step-budget 3.79MiB")) << line;
  EXPECT_TRUE(has(line, " --preset llama-tiny")) << line;
  const RunResult q = ok({"plan", "--layers", "2", "--step-budget", "24MiB"});
  EXPECT_FALSE(has(q.out, "--preset")) << q.out;
}
}  // namespace

namespace {
// A negative --lr-decay-steps is refused before training, naming the flag.
TEST(RunDescription, NegativeDecayLengthIsRefused) {
  check_user_error(run_remat(cat({"train", "--preset", "tiny", "--steps", "1", "--lr-decay-steps", "-1"}, kQuiet)), 1,
                   {"--lr-decay-steps must be >= 0", "--lr-decay-steps 5000"});
}
}  // namespace
