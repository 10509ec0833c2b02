// remat plan and remat train --budget / --plan from the command line (issue #9): the frontier beside
// the textbook strategies, a whole-step budget planned and trained from the printed `use:` line,
// plan files written and read back (and refused when made for another run, corrupt, truncated,
// mistyped, of an unknown version, with a schedule invalid for L or unknown policies), the spec's
// self-test (a) for GPT-3's 96 layers, chains too long to plan, and the frontier SVG. With
// --calibration, plan and train --budget plan by calibrated time and refuse a calibration made for
// another run.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <regex>

#include "run.h"

using namespace remat_cli_test;
using nlohmann::json;

namespace {

#define EXPECT_USER_ERROR(r, ...)            \
  do {                                       \
    SCOPED_TRACE("expected a user error");   \
    check_user_error((r), 1, {__VA_ARGS__}); \
  } while (0)

RunResult ok(const std::vector<std::string>& args) {
  RunResult r = run_remat(args);
  EXPECT_TRUE(r.exited() && r.exit_code == 0) << r.describe();
  return r;
}
bool has(const std::string& s, const std::string& n) { return s.find(n) != std::string::npos; }
std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> w;
  std::istringstream in(line);
  for (std::string x; in >> x;) w.push_back(x);
  return w;
}
const std::vector<std::string> kOneStep{"--steps", "1", "--eval-every", "0", "--eval-batches", "1", "--sample-tokens",
                                        "0", "--no-progress"};

// The `use:` line of a plan's output, as arguments.
std::vector<std::string> use_line(const RunResult& r) {
  std::smatch m;
  EXPECT_TRUE(std::regex_search(r.out, m, std::regex("\\nuse: remat (train [^\\n]*)\\n"))) << r.out;
  return m.empty() ? std::vector<std::string>{} : words(m[1]);
}

size_t whole_step_of(const std::string& report_json) { return json::parse(slurp(report_json)).at("peak_total_bytes"); }

TEST(PlanCli, FrontierBesideTheTextbookStrategies) {
  const RunResult r = ok({"plan", "--preset", "tiny"});
  EXPECT_TRUE(has(r.out, "textbook strategies:")) << r.out;
  EXPECT_TRUE(has(r.out, "optimal frontier (")) << r.out;
  for (const char* row : {"\n  none ", "\n  sqrt (2 segments) ", "\n  block ", "\n  selective ", "\n  flash "})
    EXPECT_TRUE(has(r.out, row)) << row << "\n" << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("\\n  0 checkpoints, 0 block recomputes +naive +[0-9.]+ MiB +[0-9.]+ MiB +1\\.000x\\n")))
      << r.out;
  const json j = json::parse(ok({"plan", "--preset", "tiny", "--json"}).out);
  ASSERT_GE(j.at("frontier").size(), 3u);
  for (size_t k = 1; k < j["frontier"].size(); ++k) {
    EXPECT_GT(j["frontier"][k]["predicted_step_bytes"], j["frontier"][k - 1]["predicted_step_bytes"]);  // whole step
    EXPECT_LT(j["frontier"][k]["overhead_predicted"], j["frontier"][k - 1]["overhead_predicted"]);
  }
  EXPECT_EQ(j.at("textbook").size(), 5u);
}

// `plan --budget X` prints the chosen plan and a `use:` line; pasted, it trains that plan, and the
// measured whole step fits the budget and equals the prediction.
TEST(PlanCli, BudgetUseLineTrainsWithinTheBudget) {
  TempDir d;
  struct Case {
    std::vector<std::string> model;
    std::string budget;
    size_t bytes;
  };
  for (const Case& c : std::vector<Case>{{{"--preset", "tiny"}, "6MiB", size_t(6) << 20},
                                         {{"--preset", "tiny"}, "9MiB", size_t(9) << 20},
                                         {{"--preset", "tiny", "--attention", "auto"}, "7MiB", size_t(7) << 20},
                                         {{"--preset", "llama-tiny", "--batch", "8", "--micro-batch", "4"}, "4.5MiB",
                                          size_t(4.5 * 1048576)}}) {
    std::vector<std::string> args{"plan"};
    args.insert(args.end(), c.model.begin(), c.model.end());
    args.insert(args.end(), {"--step-budget", c.budget});
    SCOPED_TRACE(c.budget);
    const RunResult p = ok(args);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(p.out, m, std::regex("predicted: whole step ([0-9.]+) (KiB|MiB) \\(activations alone [0-9.]+ (KiB|MiB)\\)")))
        << p.out;
    std::vector<std::string> train = use_line(p);
    ASSERT_FALSE(train.empty());
    for (const char* flag : {"--preset", "--batch", "--micro-batch", "--seq"})
      EXPECT_NE(std::find(train.begin(), train.end(), flag), train.end()) << flag;
    train.insert(train.end(), kOneStep.begin(), kOneStep.end());
    train.insert(train.end(), {"--report-json", d / "r.json"});
    const RunResult t = ok(train);
    EXPECT_TRUE(has(t.out, "(equal to the byte)")) << t.out;
    EXPECT_LE(whole_step_of(d / "r.json"), c.bytes) << t.out;
  }
}

// train --budget plans as plan does and trains within it; an impossible budget is refused before
// training, naming the least whole-step peak and its plan.
TEST(PlanCli, TrainBudgetFitsOrIsRefusedBeforeTraining) {
  TempDir d;
  for (const char* b : {"6MiB", "7MiB", "20MiB"}) {
    std::vector<std::string> a{"train", "--preset", "tiny", "--step-budget", b, "--report-json", d / "r.json"};
    a.insert(a.end(), kOneStep.begin(), kOneStep.end());
    const RunResult t = ok(a);
    EXPECT_TRUE(has(t.out, std::string("plan for --step-budget ") + (b[0] == '6' ? "6.00 MiB" : b[0] == '7' ? "7.00 MiB" : "20.00 MiB")))
        << t.out;
    EXPECT_LE(whole_step_of(d / "r.json"), size_t(std::atoi(b)) << 20);
  }
  for (const std::vector<std::string>& a : {std::vector<std::string>{"train", "--preset", "tiny", "--step-budget", "5MiB"},
                                            {"plan", "--preset", "tiny", "--step-budget", "5MiB"}}) {
    const RunResult r = run_remat(a);
    const std::string line = check_user_error(r, 1, {"[budget]", "--step-budget 5.00 MiB is below the least whole-step peak of any plan",
                                                     "checkpoints", "smaller --micro-batch or --seq"});
    EXPECT_TRUE(std::regex_search(line, std::regex("of any plan, [0-9.]+ MiB \\("))) << line;
    EXPECT_FALSE(has(r.out, "remat train:")) << "training started: " << r.out;
  }
  EXPECT_USER_ERROR(run_remat({"train", "--preset", "tiny", "--step-budget", "6MiB", "--recompute", "block"}),
                    "--step-budget chooses the strategy", "--recompute cannot be combined");
  EXPECT_USER_ERROR(run_remat({"train", "--preset", "tiny", "--attention", "auto"}), "--attention auto", "needs --budget");
}

// plan --out writes the plan; train --plan trains it (the use: line); another run is refused naming
// the fields that differ.
TEST(PlanCli, PlanFilesCarryThePlan) {
  TempDir d;
  const std::string file = d / "plan.json";
  const RunResult p = ok({"plan", "--preset", "tiny", "--step-budget", "6MiB", "--out", file});
  EXPECT_TRUE(has(p.out, "plan written to " + file)) << p.out;
  const json j = json::parse(slurp(file));
  for (const char* key : {"format", "version", "model", "batch", "micro_batch", "seq", "threads", "block_policy", "schedule",
                          "block_attention", "predicted"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["model"]["layers"], 2);
  EXPECT_EQ(j["model"]["attention"], "naive");
  EXPECT_LE(j["predicted"]["peak_total_bytes"].get<size_t>(), size_t(6) << 20);
  EXPECT_EQ(d.listing(), std::vector<std::string>{"plan.json"});  // written atomically: no temporary left
  std::vector<std::string> train = use_line(p);
  ASSERT_NE(std::find(train.begin(), train.end(), "--plan"), train.end());
  train.insert(train.end(), kOneStep.begin(), kOneStep.end());
  const RunResult t = ok(train);
  EXPECT_TRUE(has(t.out, "plan " + file + ": ")) << t.out;
  EXPECT_TRUE(has(t.out, "(equal to the byte)")) << t.out;

  // trace --plan runs the same plan (its schedule and policies): measured peak = the plan's prediction.
  const RunResult tr = ok({"trace", "--preset", "tiny", "--plan", file});
  std::smatch m;
  ASSERT_TRUE(std::regex_search(tr.out, m, std::regex("peak activation ([^\\n]*) measured, ([^\\n]*) predicted"))) << tr.out;
  EXPECT_EQ(m[1].str(), m[2].str()) << tr.out;
  EXPECT_TRUE(has(tr.out, "the plan " + file)) << tr.out;
  EXPECT_USER_ERROR(run_remat({"trace", "--preset", "tiny", "--plan", file, "--recompute", "sqrt"}),
                    "--recompute cannot be combined with --plan");
  EXPECT_USER_ERROR(run_remat({"trace", "--preset", "tiny", "--layers", "3", "--plan", file}), "model.layers 2 (plan) vs 3 (this run)");

  std::vector<std::string> a{"train", "--preset", "tiny", "--layers", "3", "--seq", "32", "--batch", "4", "--plan", file};
  a.insert(a.end(), kOneStep.begin(), kOneStep.end());
  EXPECT_USER_ERROR(run_remat(a), "[plan]", "was made for another run", "model.layers 2 (plan) vs 3 (this run)", "batch 8 (plan) vs 4 (this run)",
                    "seq 64 (plan) vs 32 (this run)");
  EXPECT_USER_ERROR(run_remat({"train", "--preset", "tiny", "--plan", file, "--attention", "flash"}),
                    "model.attention \"naive\" (plan) vs \"flash\" (this run)");
  EXPECT_USER_ERROR(run_remat({"train", "--preset", "tiny", "--plan", file, "--policy", "selective"}),
                    "--policy cannot be combined");
  EXPECT_USER_ERROR(run_remat({"plan", "--preset", "tiny", "--out", file}), "--out writes the plan chosen under --budget");
}

TEST(PlanCli, BadPlanFilesAreRefusedInOneLine) {
  TempDir d;
  const std::string good = d / "good.json";
  ok({"plan", "--preset", "tiny", "--step-budget", "6MiB", "--out", good});
  const std::string text = slurp(good);
  const json j = json::parse(text);
  auto refused = [&](const std::string& name, const std::string& contents, const std::vector<std::string>& needles) {
    SCOPED_TRACE(name);
    const std::string f = d.write(name, contents);
    std::vector<std::string> n{"[plan]", "plan file '" + f + "'"};
    n.insert(n.end(), needles.begin(), needles.end());
    check_user_error(run_remat({"train", "--preset", "tiny", "--plan", f, "--steps", "1"}), 1, n);
  };
  refused("truncated.json", text.substr(0, text.size() / 2), {"not valid JSON, truncated or corrupt"});
  refused("garbage.json", "\x7f" "ELF\x01\x02", {"not valid JSON"});
  refused("array.json", "[1, 2]", {"not a JSON object"});
  json k = j;
  k["format"] = "something-else";
  refused("format.json", k.dump(), {"not a remat plan"});
  k = j;
  k["version"] = 99;
  refused("version.json", k.dump(), {"unknown version 99"});
  k["version"] = 2;
  refused("version2.json", k.dump(), {"version 2 does not record the precision"});
  k = j;
  k["batch"] = "8";
  refused("type.json", k.dump(), {"field \"batch\" must be an integer, got \"8\""});
  k = j;
  k["model"]["layers"] = 2.5;
  refused("model_type.json", k.dump(), {"field \"model.layers\" must be an integer, got 2.5"});
  k = j;
  k["model"].erase("channels");
  refused("missing.json", k.dump(), {"field \"model.channels\" is missing"});
  k = j;
  k["schedule"].erase(k["schedule"].size() - 1);
  refused("short.json", k.dump(), {"schedule is not valid for 2 blocks"});
  k = j;
  k["schedule"][0] = "f7c";
  refused("block.json", k.dump(), {"block 7 is not in 0..1"});
  k = j;
  k["schedule"][0] = "zz";
  refused("token.json", k.dump(), {"field \"schedule[0]\"", "starts with 'z'"});
  k = j;
  k["block_policy"][0] = "bogus";
  refused("policy.json", k.dump(), {"unknown policy 'bogus' for gpt2", "selective"});
  k = j;
  k["block_policy"].erase(0);
  refused("policies.json", k.dump(), {"block_policy has 1 entries for 2 blocks"});
  check_user_error(run_remat({"train", "--preset", "tiny", "--plan", d / "absent.json"}), 1, {"[io]", "absent.json"});
}

// Self-test (a) at GPT-3's depth: Chen et al.'s formulas and the usual round numbers, and remat's
// figures beside them, consistent with pricing the same strategies directly.
TEST(PlanCli, Gpt3SelfTestAFigures) {
  const RunResult r = ok({"plan", "--preset", "gpt3-175b"});
  EXPECT_TRUE(has(r.out, "self-test (a), L=96")) << r.out;
  // Published work cited by author and year, never "the spec" or a section of an unnamed text.
  EXPECT_TRUE(has(r.out, "Chen et al. (2016): M_naive")) << r.out;
  for (const char* preset : {"gpt3-175b", "llama-7b", "gpt2"}) {
    const std::string out = preset == std::string("gpt3-175b") ? r.out : ok({"plan", "--preset", preset}).out;
    EXPECT_FALSE(std::regex_search(out, std::regex("\\bspec\\b|\\bspec's\\b|section [0-9]"))) << preset << "\n" << out;
  }
  EXPECT_TRUE(has(r.out, "M_naive = L|x| = 96|x|; M_checkpoint = 2 sqrt(L)|x| = 19.60|x|")) << r.out;
  EXPECT_TRUE(has(r.out, "ratio L / (2 sqrt(L)) = sqrt(L)/2 = 4.90, the usual \"roughly 5x\"")) << r.out;
  EXPECT_TRUE(has(r.out, "is sqrt(L) = 9.80")) << r.out;
  EXPECT_TRUE(has(r.out, "(1 + 2 + 1) / (1 + 2) = 1.333, the usual \"x1.33\"")) << r.out;
  EXPECT_TRUE(has(r.out, "sqrt = ceil(sqrt(96)) = 10 segments of at most 10 blocks, 10 checkpoints + 10 in flight = 20|x| "
                         "against 96|x|: ratio 4.80")) << r.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex("every saved tensor \\(dry run, fp32\\): none ([0-9.]+) GiB; sqrt as "
                                                     "Chen et al. run it \\([^)]*\\) ([0-9.]+) GiB: ratio ([0-9.]+), overhead ([0-9.]+)")))
      << r.out;
  // The same figures from pricing the strategies directly.
  const json p = json::parse(ok({"plan", "--preset", "gpt3-175b", "--recompute", "none", "sqrt", "--segment-replay",
                                 "internals", "--json"}).out);
  const double none = p[0]["predicted_activation_bytes"].get<double>() / 1073741824.0;
  EXPECT_NEAR(std::stod(m[1]), none, 0.01);
  // --recompute-last is not a plan flag: the spec's sqrt recomputes every segment, so its peak is at least
  // the default's and its overhead is the textbook 4/3 within the head's share.
  EXPECT_GE(std::stod(m[2]) + 0.01, p[1]["predicted_activation_bytes"].get<double>() / 1073741824.0);
  EXPECT_NEAR(std::stod(m[3]), std::stod(m[1]) / std::stod(m[2]), 0.01);
  EXPECT_NEAR(std::stod(m[4]), 4.0 / 3.0, 0.005);
}

// Chains too long to plan are refused in well under the test's timeout, never a blow-up; a segment
// list whose sum overflows an int is refused as a wrong sum.
TEST(PlanCli, AbsurdChainsAndSegmentListsAreRefused) {
  const auto t0 = std::chrono::steady_clock::now();
  const RunResult r = run_remat({"plan", "--layers", "100000"}, "", 60);
  EXPECT_USER_ERROR(r, "[planner]", "a chain of 100000 blocks is too long for the optimal planner", "plan fewer blocks");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 60.0);
  EXPECT_USER_ERROR(run_remat({"train", "--layers", "100000", "--step-budget", "1GiB"}, "", 60), "[");
  std::string segs = "segments:";
  for (int k = 0; k < 4294; ++k) segs += "1000000,";
  segs += "967296,4";  // 2^32 + 4: wraps to the 4 layers in 32 bits
  EXPECT_USER_ERROR(run_remat({"plan", "--recompute", segs}), "[recompute]", "sum to more than the 4 layers");
  EXPECT_USER_ERROR(run_remat({"train", "--recompute", segs, "--steps", "1"}), "[recompute]", "sum to more than the 4 layers");
}

// plan --frontier --svg draws every frontier plan, the textbook strategies and the chosen plan.
TEST(PlanCli, FrontierSvgMarksEveryStrategy) {
  TempDir d;
  const std::string svg = d / "frontier.svg";
  const RunResult r = ok({"plan", "--preset", "tiny", "--frontier", "--svg", svg, "--step-budget", "6MiB"});
  EXPECT_TRUE(has(r.out, "frontier drawn in " + svg)) << r.out;
  const std::string s = slurp(svg);
  EXPECT_EQ(s.rfind("<svg", 0) == 0 || s.rfind("<?xml", 0) == 0, true) << s.substr(0, 100);
  EXPECT_TRUE(has(s, "</svg>"));
  EXPECT_EQ(s.find("<script"), std::string::npos);
  for (const char* label : {">none<", ">sqrt (2 segments)<", ">block<", ">selective<", ">flash<", "chosen: "})
    EXPECT_TRUE(has(s, label)) << label;
  EXPECT_EQ(d.listing(), std::vector<std::string>{"frontier.svg"});
  // uniform:K rows on a deeper model.
  const std::string svg2 = d / "small.svg";
  ok({"plan", "--preset", "small", "--svg", svg2});
  for (const char* label : {">uniform:2<", ">uniform:8<", ">sqrt (4 segments)<"}) EXPECT_TRUE(has(slurp(svg2), label)) << label;
}

// plan / train --budget --calibration: the planner ranks by the calibrated time and prints it beside
// the FLOP overhead; the chosen plan is never slower, so priced, than a textbook strategy or frontier
// plan that fits; a calibration measured for another run is refused in one line.
TEST(PlanCli, CalibratedPlanning) {
  TempDir d;
  const std::string cal = d / "cal.json";
  ok({"calibrate", "--preset", "tiny", "--repeats", "1", "--untimed-rounds", "0", "--quiet", "--out", cal});
  // Synthetic seconds, so that the plan does not depend on this machine's load: a first pass that
  // stores costs more than a replay (the DRAM effect), less so under selective.
  json c = json::parse(slurp(cal));
  c.update({{"embed_forward", 0.007}, {"head_forward", 0.011}, {"head_backward", 0.013}, {"embed_backward", 0.005}, {"rest", 0.017},
            {"forward_pass", 0.1}, {"recompute_pass", 0.06}, {"free_checkpoint", 0.003}});
  const double costs[4][4] = {{0.2, 0.13, 0.38, 0.29}, {0.15, 0.16, 0.33, 0.34}, {0.19, 0.12, 0.4, 0.31}, {0.18, 0.15, 0.35, 0.32}};
  ASSERT_EQ(c["policies"].size(), 4u);
  for (size_t p = 0; p < 4; ++p)
    c["policies"][p].update({{"forward_store", costs[p][0]}, {"recompute_store", costs[p][1]},
                             {"backward_stored", costs[p][2]}, {"backward_replayed", costs[p][3]}});
  d.write("cal.json", c.dump());

  const RunResult r = ok({"plan", "--preset", "tiny", "--step-budget", "7MiB", "--calibration", cal});
  EXPECT_TRUE(has(r.out, "planned by calibrated time: " + cal)) << r.out;
  EXPECT_TRUE(has(r.out, "overhead     step time\n")) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("overhead [0-9.]+x, step time [0-9.]+ ms calibrated \\([0-9.]+x none's [0-9.]+ ms\\)\\n")))
      << r.out;
  const std::vector<std::string> use = use_line(r);
  if (std::find(use.begin(), use.end(), "--step-budget") != use.end())  // train plans again: with the same time model
    EXPECT_NE(std::find(use.begin(), use.end(), "--calibration"), use.end()) << r.out;

  const json j = json::parse(ok({"plan", "--preset", "tiny", "--step-budget", "7MiB", "--calibration", cal, "--frontier", "--json"}).out);
  const double chosen = j.at("plan").at("predicted").at("step_seconds");
  int compared = 0;
  for (const char* table : {"textbook", "frontier"})
    for (const json& row : j.at(table)) {
      if (!row.contains("predicted_step_seconds") || row["predicted_step_bytes"].get<size_t>() > (size_t(7) << 20)) continue;
      EXPECT_LE(chosen, row["predicted_step_seconds"].get<double>()) << row.dump();
      ++compared;
    }
  EXPECT_GE(compared, 4);

  std::vector<std::string> train{"train", "--preset", "tiny", "--step-budget", "7MiB", "--calibration", cal};
  train.insert(train.end(), kOneStep.begin(), kOneStep.end());
  const RunResult t = ok(train);
  EXPECT_TRUE(std::regex_search(t.out, std::regex("plan for --step-budget 7.00 MiB [^\\n]*, step time [0-9.]+ ms \\(calibrated\\)\\n")))
      << t.out;

  // Another model, micro-batch or thread count: refused in one line, before any planning or training.
  EXPECT_USER_ERROR(run_remat({"plan", "--preset", "tiny", "--layers", "3", "--calibration", cal}), "[calibration]",
                    "was measured for another run", "model.layers 2 (file) vs 3 (this run)", "remat calibrate");
  EXPECT_USER_ERROR(run_remat({"plan", "--preset", "tiny", "--batch", "4", "--calibration", cal}), "batch 8 (file) vs 4 (this run)");
  EXPECT_USER_ERROR(run_remat({"train", "--preset", "tiny", "--threads", "2", "--step-budget", "7MiB", "--calibration", cal}),
                    "[calibration]", "threads 1 (file) vs 2 (this run)");  // children run with one thread (run.h)
  EXPECT_USER_ERROR(run_remat({"plan", "--preset", "tiny", "--attention", "auto", "--calibration", cal}),
                    "a calibration prices one attention kernel", "--attention naive");
  EXPECT_USER_ERROR(run_remat({"plan", "--preset", "tiny", "--recompute", "block", "--calibration", cal}),
                    "--recompute prices fixed strategies");
  EXPECT_USER_ERROR(run_remat({"train", "--preset", "tiny", "--calibration", cal}), "--calibration is the time model --budget");
  EXPECT_USER_ERROR(run_remat({"plan", "--preset", "tiny", "--calibration", d / "absent.json"}), "absent.json");
}

}  // namespace

// --attention auto lets the planner choose the kernel per block (issue #9, item 3). On llama-tiny at
// 3.79 MiB a mix wins: plan prints it per block, the plan file carries it (version 2,
// "block_attention"), trace --plan runs it with each block's kernel (measured peak = prediction),
// and train --plan trains it, the report's whole-step prediction equal to the measurement.
TEST(PlanCli, PerBlockAttentionKernels) {
  TempDir d;
  const std::string file = d / "mixed.json";
  const std::vector<std::string> model{"--preset", "llama-tiny", "--batch", "4", "--micro-batch", "2"};
  std::vector<std::string> args{"plan"};
  args.insert(args.end(), model.begin(), model.end());
  for (const char* a : {"--attention", "auto", "--step-budget", "3.79MiB", "--out"}) args.push_back(a);
  args.push_back(file);
  const RunResult p = ok(args);
  EXPECT_TRUE(has(p.out, "attention per block: 0 naive, 1 flash")) << p.out;
  EXPECT_TRUE(has(p.out, "\nuse: remat train")) << p.out;
  EXPECT_TRUE(has(p.out, "--plan " + file)) << p.out;
  const json j = json::parse(slurp(file));
  EXPECT_EQ(j["version"], 3);
  EXPECT_EQ(j["block_attention"], json::array({"naive", "flash"}));

  std::vector<std::string> trace{"trace"};
  trace.insert(trace.end(), model.begin(), model.end());
  trace.insert(trace.end(), {"--plan", file});
  const RunResult tr = ok(trace);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(tr.out, m, std::regex("peak activation ([^\\n]*) measured, ([^\\n]*) predicted"))) << tr.out;
  EXPECT_EQ(m[1].str(), m[2].str()) << tr.out;

  std::vector<std::string> train{"train"};
  train.insert(train.end(), model.begin(), model.end());
  train.insert(train.end(), {"--plan", file});
  train.insert(train.end(), kOneStep.begin(), kOneStep.end());
  // bench --time-model prices one kernel (a calibration covers one): a mixed plan is refused there.
  std::vector<std::string> bench{"bench", "--time-model"};
  bench.insert(bench.end(), model.begin(), model.end());
  bench.insert(bench.end(), {"--plan", file});
  EXPECT_USER_ERROR(run_remat(bench), "runs a different attention kernel per block", "--time-model prices one kernel");
  const RunResult t = ok(train);
  EXPECT_TRUE(has(t.out, "attention per block: 0 naive, 1 flash")) << t.out;
  EXPECT_TRUE(has(t.out, "whole step: predicted = measured, to the byte")) << t.out;
  EXPECT_TRUE(has(t.out, "(equal to the byte)")) << t.out;
}
