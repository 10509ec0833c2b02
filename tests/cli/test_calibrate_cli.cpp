// `remat calibrate` and `remat bench --time-model` end to end on a tiny model: the file it writes,
// the side-by-side table that reads it, and the refusals (a file for another run, a corrupt file, a
// policy the model lacks, flags that do not combine). No timing is asserted.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "run.h"

namespace {

using namespace remat_cli_test;
using nlohmann::json;

bool has(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

std::vector<std::string> tiny(std::vector<std::string> args) {
  for (const char* a : {"--preset", "tiny", "--batch", "2"}) args.push_back(a);
  return args;
}

TEST(CliCalibrate, WritesAFileThatBenchReads) {
  TempDir dir;
  const std::string cal = dir / "cal.json";
  RunResult r = run_remat(tiny({"calibrate", "--out", cal, "--repeats", "1", "--untimed-rounds", "0"}));
  ASSERT_TRUE(r.exited() && r.exit_code == 0) << r.describe();
  EXPECT_TRUE(has(r.out, "wrote " + cal)) << r.out;
  EXPECT_TRUE(has(r.out, "predicted step: none")) << r.out;
  const json j = json::parse(slurp(cal));
  EXPECT_EQ(j["format"], "remat-calibration");
  EXPECT_EQ(j["version"], 2);
  EXPECT_EQ(j["model"]["layers"], 2);
  EXPECT_EQ(j["model"]["precision"], "f32");
  EXPECT_EQ(j["batch"], 2);
  EXPECT_EQ(j["seq"], 64);
  EXPECT_EQ(j["threads"], 1);  // the CLI tests run children with OMP_NUM_THREADS=1
  EXPECT_EQ(j["clock"], "wall");
  std::vector<std::string> names;
  for (const auto& p : j["policies"]) names.push_back(p["name"]);
  EXPECT_EQ(names, (std::vector<std::string>{"none", "selective", "gelu", "norms"}));
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"cal.json"});  // no temporary file left

  r = run_remat(tiny({"bench", "--time-model", "--calibration", cal, "--timed-steps", "1", "--untimed-steps", "0", "--json"}));
  ASSERT_TRUE(r.exited() && r.exit_code == 0) << r.describe();
  const json rows = json::parse(r.out);
  std::vector<std::string> labels;
  for (const auto& row : rows) {
    labels.push_back(row["row"]);
    for (const char* k : {"overhead_measured", "overhead_flops", "overhead_calibrated", "calibrated_minus_measured_points"})
      EXPECT_TRUE(row[k].is_number()) << k;
    EXPECT_EQ(row["calibration"], cal);
  }
  EXPECT_EQ(labels, (std::vector<std::string>{"none", "block", "sqrt", "selective", "budget plan", "none (again)"}));
  EXPECT_EQ(rows[0]["overhead_measured"], 1.0);
  EXPECT_EQ(rows[0]["overhead_calibrated"], 1.0);
  // The budget plan fits midway between block and none.
  EXPECT_LT(rows[4]["predicted_activation_bytes"].get<double>(),
            0.5 * (rows[0]["predicted_activation_bytes"].get<double>() + rows[1]["predicted_activation_bytes"].get<double>()) + 1);

  // The table, calibrating in the run itself.
  r = run_remat(tiny({"bench", "--time-model", "--timed-steps", "1", "--untimed-steps", "0"}));
  ASSERT_TRUE(r.exited() && r.exit_code == 0) << r.describe();
  for (const char* s : {"calibration measured in this run", "budget plan:", "FLOP pts", "cal. pts", "none (again)"})
    EXPECT_TRUE(has(r.out, s)) << s << "\n" << r.out;
}

TEST(CliCalibrate, RefusesAFileForAnotherRunOrCorrupt) {
  TempDir dir;
  const std::string cal = dir / "cal.json";
  RunResult r = run_remat(tiny({"calibrate", "--out", cal, "--repeats", "1", "--untimed-rounds", "0", "--policies", "none,selective"}));
  ASSERT_TRUE(r.exited() && r.exit_code == 0) << r.describe();
  const std::vector<std::string> bench{"bench", "--time-model", "--calibration", cal, "--timed-steps", "1", "--untimed-steps", "0"};

  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = tiny(bench);
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  check_user_error(run_remat(with({"--layers", "3"})), 1, {"[calibration]", "measured for another run", "model.layers 2 (file) vs 3 (this run)"});
  check_user_error(run_remat(with({"--seq", "32"})), 1, {"model.block_size 64 (file) vs 32 (this run)"});
  check_user_error(run_remat(with({"--attention", "flash"})), 1, {"attention"});
  check_user_error(run_remat(with({"--threads", "2"})), 1, {"threads 1 (file) vs 2 (this run)"});
  std::vector<std::string> b4 = bench;
  for (const char* a : {"--preset", "tiny", "--batch", "4"}) b4.push_back(a);
  check_user_error(run_remat(b4), 1, {"batch 2 (file) vs 4 (this run)"});
  check_user_error(run_remat(with({"--clock", "cpu"})), 1, {"clock \"wall\" (file) vs \"cpu\" (this run)"});

  const std::string garbage = dir.write("garbage.json", "{\"format\": \"remat-calibration\", \"version\": 1,");
  std::vector<std::string> a = tiny({"bench", "--time-model", "--calibration", garbage});
  check_user_error(run_remat(a), 1, {"not a usable calibration file", "not valid JSON", "remat calibrate"});
  json j = json::parse(slurp(cal));
  j["version"] = 99;
  const std::string future = dir.write("future.json", j.dump());
  a = tiny({"bench", "--time-model", "--calibration", future});
  check_user_error(run_remat(a), 1, {"calibration version 99"});
  a = tiny({"bench", "--time-model", "--calibration", dir / "absent.json"});
  check_user_error(run_remat(a), 1, {"absent.json"});
}

TEST(CliCalibrate, RefusesBadFlagsBeforeWork) {
  TempDir dir;
  const std::string cal = dir.write("cal.json", "old contents");
  check_user_error(run_remat(tiny({"calibrate", "--out", cal, "--policies", "none,swiglu"})), 1, {"swiglu"});
  EXPECT_EQ(slurp(cal), "old contents");  // a failed calibration leaves the file alone
  check_user_error(run_remat(tiny({"calibrate", "--out", cal, "--policies", "none,none"})), 1, {"listed twice"});
  check_user_error(run_remat(tiny({"calibrate", "--out", cal, "--repeats", "0"})), 1, {"--repeats"});
  check_user_error(run_remat(tiny({"calibrate", "--out", dir.path()})), 1, {"--out"});
  EXPECT_EQ(slurp(cal), "old contents");
  check_user_error(run_remat(tiny({"calibrate"})), 2, {"--out"});
  // bench reads a calibration without --time-model too: checked before any row runs.
  check_user_error(run_remat(tiny({"bench", "--calibration", cal})), 1, {"not a usable calibration file"});
  check_user_error(run_remat(tiny({"bench", "--time-model", "--micro-batch", "1"})), 1, {"--micro-batch"});
  check_user_error(run_remat(tiny({"bench", "--clock", "cpu"})), 1, {"--clock is read only by --time-model"});
}

}  // namespace
