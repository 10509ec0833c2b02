// remat plan --budget from the command line: a larger whole-step budget never prints a slower plan
// (two budgets of the llama-shakespeare preset where an older planner chose 1.168x, then 1.241x), a
// plan records its thread count, and what plan prints is true (refusals, labels, one overhead figure).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "run.h"

using namespace remat_cli_test;

namespace {

// The predicted overhead of the plan `remat plan ... --budget B` prints.
double planned_overhead(std::vector<std::string> args, const std::string& budget) {
  args.insert(args.begin(), "plan");
  args.insert(args.end(), {"--step-budget", budget});
  const RunResult r = run_remat(args);
  EXPECT_TRUE(r.exited() && r.exit_code == 0) << r.describe();
  std::smatch m;
  static const std::regex re("predicted: whole step [^\\n]*overhead ([0-9.]+)x");
  if (!std::regex_search(r.out, m, re)) {
    ADD_FAILURE() << "no predicted overhead in:\n" << r.out;
    return 0;
  }
  return std::stod(m[1]);
}

}  // namespace

TEST(PlanBudget, MoreMemoryIsNeverSlowerLlamaShakespeare) {
  const std::vector<std::string> run{"--preset", "llama-shakespeare", "--threads", "1"};
  const double tight = planned_overhead(run, "35183848"), loose = planned_overhead(run, "35708136");
  EXPECT_LE(loose, tight) << "35708136 B gave a slower plan than 35183848 B";
  EXPECT_LE(tight, 1.17);
}

// The whole step's workspace depends on the thread count, so a plan records the count it was priced
// at, and a run at another count is refused by name.
TEST(PlanBudget, APlanIsForItsThreadCount) {
  TempDir d;
  const std::string file = d.path() + "/th.json";
  const std::vector<std::string> model{"--arch", "llama", "--layers", "5", "--channels", "96", "--heads", "1",
                                       "--kv-heads", "1", "--hidden", "192", "--seq", "16", "--vocab", "256",
                                       "--dropout", "0.1", "--batch", "2"};
  std::vector<std::string> plan{"plan"};
  plan.insert(plan.end(), model.begin(), model.end());
  plan.insert(plan.end(), {"--threads", "1", "--step-budget", "9700000", "--out", file});
  const RunResult p = run_remat(plan);
  ASSERT_TRUE(p.exited() && p.exit_code == 0) << p.describe();
  std::vector<std::string> train{"train"};
  train.insert(train.end(), model.begin(), model.end());
  train.insert(train.end(), {"--threads", "2", "--plan", file, "--steps", "1",
                             "--eval-every", "0", "--eval-batches", "1", "--sample-tokens", "0", "--no-progress"});
  check_user_error(run_remat(train), 1, {"[plan]", "threads", "another run"});
}

// A refused budget 1 byte below the least plan states both sizes so that they differ.
TEST(PlanBudget, ARefusalStatesBothNumbersApart) {
  const std::vector<std::string> model{"plan", "--arch", "gpt2", "--layers", "2", "--channels", "32", "--heads", "4",
                                       "--seq", "16", "--vocab", "64", "--batch", "2", "--threads", "1", "--step-budget"};
  auto with = [&](const std::string& b) {
    std::vector<std::string> a = model;
    a.push_back(b);
    return run_remat(a);
  };
  const RunResult tiny = with("1KiB");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(tiny.err, m, std::regex("least whole-step peak of any plan, ([0-9.]+) (KiB|MiB)"))) << tiny.err;
  // Bisect the least peak in bytes from the accepted and refused budgets.
  size_t lo = 1024, hi = size_t(std::stod(m[1]) * (m[2] == "MiB" ? 1048576.0 : 1024.0)) + 65536;
  while (hi - lo > 1) {
    const size_t mid = lo + (hi - lo) / 2;
    (with(std::to_string(mid)).exit_code == 0 ? hi : lo) = mid;
  }
  const std::string err = check_user_error(with(std::to_string(lo)), 1, {"[budget]", std::to_string(lo), std::to_string(hi)});
  EXPECT_EQ(err.find(std::to_string(hi) + " bytes") != std::string::npos, true) << err;
}

// What plan prints names what it measures: bf16 figures as bf16, "model state" as what it holds, and
// the sqrt sentence as arithmetic on its own figures.
TEST(PlanBudget, Gpt3SelfTestSaysTrueThings) {
  const RunResult r = run_remat({"plan", "--preset", "gpt3-175b", "--precision", "bf16"});
  ASSERT_TRUE(r.exited() && r.exit_code == 0) << r.describe();
  EXPECT_EQ(r.out.find("dry run, fp32"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(dry run, bf16)"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("one block's internals on top of its boundaries"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("model state: parameters, gradients and AdamW moments"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("AdamW state"), std::string::npos) << r.out;
}

// One overhead figure per plan: what `plan` prints for the chosen plan is what its file holds (and
// what `train` reports), flash plans of a naive model included.
TEST(PlanBudget, OneOverheadFigurePerPlan) {
  TempDir d;
  const std::vector<std::string> model{"plan", "--arch", "gpt2", "--layers", "2", "--channels", "64", "--heads", "4",
                                       "--seq", "64", "--vocab", "64", "--batch", "2", "--threads", "1",
                                       "--attention", "auto"};
  std::vector<std::string> a = model;
  a.push_back("--json");
  const RunResult rows = run_remat(a);
  ASSERT_TRUE(rows.exited() && rows.exit_code == 0) << rows.describe();
  const nlohmann::json j = nlohmann::json::parse(rows.out);
  std::vector<size_t> budgets;
  for (const char* list : {"textbook", "frontier"})
    for (const nlohmann::json& r : j.at(list)) budgets.push_back(r.at("predicted_step_bytes").get<size_t>());
  int flash = 0;
  for (size_t b : budgets) {
    std::vector<std::string> p = model;
    p.insert(p.end(), {"--step-budget", std::to_string(b), "--out", d.path() + "/p.json"});
    const RunResult r = run_remat(p);
    ASSERT_TRUE(r.exited() && r.exit_code == 0) << r.describe();
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.out, m, std::regex("predicted: whole step [^\\n]*overhead ([0-9.]+)x"))) << r.out;
    const nlohmann::json file = nlohmann::json::parse(slurp(d.path() + "/p.json"));
    EXPECT_NEAR(std::stod(m[1]), file.at("predicted").at("overhead").get<double>(), 0.0005) << r.out;
    flash += file.at("model").at("attention") == "flash";
  }
  EXPECT_GT(flash, 0) << "no budget chose an all-flash plan";
}
