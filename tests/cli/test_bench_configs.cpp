// `remat bench --time-model --configs`: several models in one run and one table (issue #9's time
// table in one `remat bench` run), malformed config specs refused in one line; and `remat bench
// --plan FILE`: a plan made by `remat plan --out` benched beside none (and beside --time-model's
// rows), a plan for another run refused naming what differs. Tiny models; no timing is asserted.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "run.h"

namespace {

using namespace remat_cli_test;
using nlohmann::json;

bool has(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

RunResult ok(const std::vector<std::string>& args) {
  RunResult r = run_remat(args);
  EXPECT_TRUE(r.exited() && r.exit_code == 0) << r.describe();
  return r;
}

// --time-model on the tiny preset (L2 C64 NH4 T64), one round per row.
std::vector<std::string> time_model(std::vector<std::string> extra) {
  std::vector<std::string> a{"bench", "--time-model", "--preset", "tiny", "--timed-steps", "1", "--untimed-steps", "0"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

const std::vector<std::string> kRows{"none", "block", "sqrt", "selective", "budget plan", "none (again)"};

TEST(BenchConfigs, TwoConfigsInOneRunGiveBothSetsOfRows) {
  const std::string spec = "L2 C64 B2; l3 C32 nh2 T32 B1";
  const json rows = json::parse(ok(time_model({"--configs", spec, "--json"})).out);
  ASSERT_EQ(rows.size(), 2 * kRows.size()) << rows.dump(1);
  for (size_t i = 0; i < rows.size(); ++i) {
    const json& r = rows[i];
    const bool first = i < kRows.size();
    EXPECT_EQ(r["row"], kRows[i % kRows.size()]);
    // Each config as its spec says, the other model flags (the preset's vocabulary) kept.
    EXPECT_EQ(r["config_spec"], first ? "L2 C64 B2" : "l3 C32 nh2 T32 B1");
    EXPECT_EQ(r["config"], first ? "gpt2 L=2 C=64 NH=4 T=64 V=256" : "gpt2 L=3 C=32 NH=2 T=32 V=256");
    EXPECT_EQ(r["batch"], first ? 2 : 1);
    EXPECT_EQ(r["seq"], first ? 64 : 32);
    EXPECT_EQ(r["calibration"], "measured in this run");  // each config calibrated in the run
    for (const char* k : {"overhead_measured", "overhead_flops", "overhead_calibrated", "flops_minus_measured_points",
                          "calibrated_minus_measured_points"})
      EXPECT_TRUE(r[k].is_number()) << k;
  }
  EXPECT_EQ(rows[0]["overhead_measured"], 1.0);
  EXPECT_EQ(rows[kRows.size()]["overhead_calibrated"], 1.0);
  // Each config its own dry run: the first has more activation bytes than the second, row by row.
  EXPECT_GT(rows[0]["predicted_activation_bytes"].get<size_t>(), rows[kRows.size()]["predicted_activation_bytes"].get<size_t>());

  // The table: the command at the top, one header, a row per (config, row), the worst errors, the notes.
  const RunResult r = ok(time_model({"--configs", spec}));
  const std::vector<std::string> lines = split_lines(r.out);
  ASSERT_GE(lines.size(), 3u) << r.out;
  EXPECT_EQ(lines[0], "command: remat bench --preset tiny --timed-steps 1 --untimed-steps 0 --time-model --configs 'L2 C64 B2; l3 C32 "
                      "nh2 T32 B1'") << r.out;
  size_t headers = 0, first_rows = 0, second_rows = 0;
  for (const std::string& l : lines) {
    headers += l.rfind("config ", 0) == 0 && has(l, "cal. pts");
    for (std::string row : kRows) {
      row.resize(14, ' ');  // the row column, 13 wide, and a space
      first_rows += l.rfind("L2 C64 B2          " + row, 0) == 0;
      second_rows += l.rfind("l3 C32 nh2 T32 B1  " + row, 0) == 0;
    }
  }
  EXPECT_EQ(headers, 1u) << r.out;
  EXPECT_EQ(first_rows, kRows.size()) << r.out;
  EXPECT_EQ(second_rows, kRows.size()) << r.out;
  EXPECT_TRUE(has(r.out, "\nworst error over block, sqrt, selective, budget plan, all 2 configs: FLOP ")) << r.out;
  EXPECT_TRUE(has(r.out, "\nL2 C64 B2          gpt2 L=2 C=64 NH=4 T=64 V=256, B=2, T=64")) << r.out;
  EXPECT_TRUE(has(r.out, "\nl3 C32 nh2 T32 B1  gpt2 L=3 C=32 NH=2 T=32 V=256, B=1, T=32")) << r.out;
}

TEST(BenchConfigs, MalformedSpecsAreRefusedInOneLineWithAHint) {
  auto refused = [](const std::string& spec, const std::vector<std::string>& needles, std::vector<std::string> extra = {}) {
    SCOPED_TRACE(spec);
    std::vector<std::string> a = time_model({"--configs", spec});
    a.insert(a.end(), extra.begin(), extra.end());
    std::vector<std::string> n = needles;
    n.push_back("write e.g. --configs 'L16 C256 NH4 T256 B8; L12 C768 NH12 T256 B2'");
    check_user_error(run_remat(a), 1, n);
  };
  refused("L2 X3", {"config 1 of --configs 'L2 X3': 'X3' does not start with a key"});
  refused("L2 C64; 16 C256", {"config 2 of", "'16' does not start with a key"});
  refused("L0", {"'L0' needs a positive whole number after L"});
  refused("L-2", {"'L-2' needs a positive whole number after L"});
  refused("Lx", {"'Lx' does not start with a key"});
  refused("C", {"'C' needs a positive whole number after C"});
  refused("L99999999999999999999", {"needs a positive whole number after L"});
  refused("L2;;L3", {"config 2 of", "is empty"});
  refused("L2;", {"config 2 of", "is empty"});
  refused("", {"config 1 of", "is empty"});
  refused("L2 C64 L3", {"gives L twice"});
  // A key that the model flags also set: which one would win is not guessed.
  check_user_error(run_remat(time_model({"--layers", "3", "--configs", "L2"})), 1,
                   {"sets L and --layers is given too", "drop --layers"});
  check_user_error(run_remat(time_model({"--batch", "3", "--configs", "B2"})), 1, {"sets B and --batch is given too"});
  // A config no model can be: the model flags' own message, naming the config.
  check_user_error(run_remat(time_model({"--configs", "L2; C63"})), 1, {"config 2 of --configs 'L2; C63'", "63"});
  check_user_error(run_remat({"bench", "--preset", "tiny", "--configs", "L2"}), 1,
                   {"--configs is read only by --time-model"});
  // One calibration file per config; by default (no model flag) the two configs of the time table.
  check_user_error(run_remat(time_model({"--configs", "L2 B2; L3 B2", "--calibration", "a.json"})), 1,
                   {"2 configs but 1 calibration file", "one --calibration file per config"});
  check_user_error(run_remat({"bench", "--time-model", "--calibration", "a.json"}), 1, {"2 configs but 1 calibration file"});
}

// --calibration takes one file per config, in order; each is checked against its config before any
// config is measured.
TEST(BenchConfigs, CalibrationFilesOnePerConfigCheckedBeforeAnyWork) {
  TempDir d;
  const std::string c2 = d / "l2.json", c3 = d / "l3.json";
  for (const auto& [file, layers] : {std::pair<std::string, const char*>{c2, "2"}, {c3, "3"}})
    ok({"calibrate", "--preset", "tiny", "--layers", layers, "--batch", "2", "--out", file, "--repeats", "1", "--untimed-rounds",
        "0", "--policies", "none,selective"});
  const json rows = json::parse(ok(time_model({"--configs", "L2 B2; L3 B2", "--calibration", c2, c3, "--json"})).out);
  ASSERT_EQ(rows.size(), 2 * kRows.size());
  EXPECT_EQ(rows[0]["calibration"], c2);
  EXPECT_EQ(rows[kRows.size()]["calibration"], c3);
  // Config 2 given config 1's file: refused before config 1 runs (nothing printed).
  const RunResult w = run_remat(time_model({"--configs", "L2 B2; L3 B2", "--calibration", c2, c2}));
  check_user_error(w, 1, {"[calibration]", "model.layers 2 (file) vs 3 (this run)"});
  EXPECT_EQ(w.out, "") << "refused before any config is measured";
}

TEST(BenchPlan, BenchesAPlanFileAndRefusesAnotherRun) {
  TempDir d;
  const std::string file = d / "plan.json";
  ok({"plan", "--preset", "tiny", "--step-budget", "6MiB", "--out", file});
  const json plan = json::parse(slurp(file));

  // Rows: none, then the plan; the output names the plan; its measured peak is its prediction.
  const std::vector<std::string> bench{"bench", "--preset", "tiny", "--plan", file, "--timed-steps", "1", "--untimed-steps", "0"};
  RunResult r = ok(bench);
  EXPECT_TRUE(has(r.out, "\nplan " + file + ": " + plan["summary"].get<std::string>() + ", attention naive (row \"plan\")\n"))
      << r.out;
  EXPECT_TRUE(has(r.out, "\nnone ")) << r.out;
  EXPECT_TRUE(has(r.out, "\nplan ")) << r.out;
  std::vector<std::string> a = bench;
  a.push_back("--json");
  const json rows = json::parse(ok(a).out);
  ASSERT_EQ(rows.size(), 2u) << rows.dump(1);
  EXPECT_EQ(rows[0]["strategy"], "none");
  EXPECT_EQ(rows[1]["strategy"], "plan");
  EXPECT_EQ(rows[1]["plan_file"], file);
  EXPECT_EQ(rows[1]["peak_activation_bytes"], plan["predicted"]["peak_activation_bytes"]);
  EXPECT_EQ(rows[1]["predicted_activation_bytes"], plan["predicted"]["peak_activation_bytes"]);
  EXPECT_LT(rows[1]["peak_activation_bytes"].get<size_t>(), rows[0]["peak_activation_bytes"].get<size_t>());
  // --recompute rows run beside the plan.
  a = bench;
  for (const char* x : {"--recompute", "block", "--json"}) a.push_back(x);
  const json rows2 = json::parse(ok(a).out);
  ASSERT_EQ(rows2.size(), 2u);
  EXPECT_EQ(rows2[0]["strategy"], "block");

  // --time-model: the plan's row beside the others, the file named.
  r = ok({"bench", "--time-model", "--preset", "tiny", "--plan", file, "--timed-steps", "1", "--untimed-steps", "0"});
  EXPECT_TRUE(has(r.out, "\nplan " + file + ": ")) << r.out;
  EXPECT_TRUE(has(r.out, "  plan ")) << r.out;
  EXPECT_TRUE(has(r.out, "worst error over block, sqrt, selective, budget plan, plan, one config")) << r.out;

  // A plan for another run: every differing field named.
  check_user_error(run_remat({"bench", "--preset", "tiny", "--layers", "3", "--seq", "32", "--batch", "4", "--plan", file}),
                   1, {"[plan]", "was made for another run", "model.layers 2 (plan) vs 3 (this run)", "batch 8 (plan) vs 4 (this run)",
                       "seq 64 (plan) vs 32 (this run)"});
  check_user_error(run_remat({"bench", "--time-model", "--preset", "tiny", "--vocab", "128", "--plan", file}), 1,
                   {"model.vocab 256 (plan) vs 128 (this run)"});
  check_user_error(run_remat({"bench", "--preset", "tiny", "--plan", file, "--recompute-last"}), 1,
                   {"--recompute-last cannot be combined with --plan"});
  check_user_error(run_remat({"bench", "--time-model", "--plan", file, "--configs", "L2"}), 1,
                   {"--configs cannot be combined with --plan"});
  check_user_error(run_remat({"bench", "--preset", "tiny", "--plan", d / "absent.json"}), 1, {"absent.json"});
}

}  // namespace
