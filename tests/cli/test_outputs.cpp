// One output policy for every subcommand ("never clobber", core/io_policy.h): no output replaces an
// input or another output, FIFO inputs are refused instead of blocking, the process's own streams are
// refused as files ("-" streams to stdout), read-only outputs are refused, a refused command creates
// nothing, and --metrics-out survives a resume and a full disk with whole lines only.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "run.h"

namespace {

using namespace remat_cli_test;

const std::vector<std::string> kModel = {"--layers", "2", "--channels", "64", "--heads", "4", "--seq", "32"};

std::vector<std::string> cat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// `remat train` on the tiny model, one step, on `data` (or the built-in corpus).
std::vector<std::string> tiny(std::vector<std::string> extra) {
  return cat(tiny_train(cat(kModel, {"--batch", "2", "--steps", "1"})), extra);
}

// The refusal contract, and nothing trained or written to stdout first.
void refused(const RunResult& r, const std::vector<std::string>& needles) {
  check_user_error(r, 1, needles);
  EXPECT_EQ(r.out.find("step 1"), std::string::npos) << "refused before any work";
}

// Weights of the tiny model and a text file to read, in `d`.
struct Inputs {
  std::string weights, data;
};
Inputs make_inputs(const TempDir& d) {
  Inputs in;
  in.data = d.write("t.txt", std::string(4000, 'a') + "the quick brown fox\n");
  in.weights = d / "w.safetensors";
  const RunResult r = run_remat(tiny({"--save", in.weights}));
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  return in;
}

// Runs `cmd` with /bin/sh (for redirections a test cannot spell with run_remat); its exit code.
int shell(const std::string& cmd) {
  const int s = std::system(("OMP_NUM_THREADS=1 " + cmd).c_str());
  return WIFEXITED(s) ? WEXITSTATUS(s) : -1;
}

std::string remat_tiny_line(const std::string& extra) {
  std::string line = std::string(REMAT_BINARY);
  for (const auto& a : tiny({})) line += " " + a;
  return line + " " + extra;
}

}  // namespace

// (3) grads --out never replaces what grads reads: the weights, the data, a model folder's weights.
TEST(CliOutputs, GradsOutIsNeverAnInput) {
  TempDir d;
  const Inputs in = make_inputs(d);
  const std::string weights = slurp(in.weights), text = slurp(in.data);
  const std::vector<std::string> g = {"grads", "--batch", "1", "--seq", "16"};
  refused(run_remat(cat(g, {"--init-from", in.weights, "--data", in.data, "--out", in.weights})),
          {"[io]", "--out", "--init-from", in.weights});
  refused(run_remat(cat(g, {"--init-from", in.weights, "--data", in.data, "--out", in.data})),
          {"--out", "--data", in.data});
  fs::create_symlink(in.weights, d / "link.safetensors");
  refused(run_remat(cat(g, {"--init-from", in.weights, "--data", in.data, "--out", d / "link.safetensors"})),
          {"--out", "--init-from", "link.safetensors"});
  fs::create_directories(d / "model");
  fs::copy_file(in.weights, d / "model/model.safetensors");
  refused(run_remat(cat(g, {"--init-from", d / "model", "--data", in.data, "--out", d / "model/model.safetensors"})),
          {"--out", "--init-from", "inside the input folder"});
  EXPECT_EQ(slurp(in.weights), weights);
  EXPECT_EQ(slurp(d / "model/model.safetensors"), weights);
  EXPECT_EQ(slurp(in.data), text);
  // Elsewhere it writes.
  const RunResult ok = run_remat(cat(g, {"--init-from", d / "model", "--data", in.data, "--out", d / "g.safetensors"}));
  EXPECT_EQ(ok.exit_code, 0) << ok.describe();
}

// (4) A FIFO as --data or --val-data is refused up front instead of blocking in open() (where SIGTERM
// was not served). The timeout is a guard: the old code hung until it.
TEST(CliOutputs, FifoInputsAreRefusedNotOpened) {
  TempDir d;
  const Inputs in = make_inputs(d);
  ASSERT_EQ(mkfifo((d / "fifo").c_str(), 0600), 0);
  const double guard = 60;
  refused(run_remat(tiny({"--data", d / "fifo"}), "", guard), {"--data", "fifo", "a FIFO"});
  refused(run_remat(tiny({"--data", in.data, "--val-data", d / "fifo"}), "", guard), {"--val-data", "a FIFO"});
  refused(run_remat(tiny({"--data", in.data, "--val-data", d / "fifo", "--step-budget", "1GiB"}), "", guard),
          {"--val-data", "a FIFO"});
  refused(run_remat({"grads", "--init-from", in.weights, "--data", d / "fifo", "--out", d / "g.safetensors"}, "", guard),
          {"--data", "a FIFO"});
  refused(run_remat(cat({"plan", "--batch", "2"}, cat(kModel, {"--data", d / "fifo"})), "", guard),
          {"--data", "a FIFO"});
  refused(run_remat(cat({"bench", "--timed-steps", "1", "--batch", "2"}, cat(kModel, {"--data", d / "fifo"})), "", guard),
          {"--data", "a FIFO"});
}

// (5) plan's and trace's outputs replace neither their inputs nor each other.
TEST(CliOutputs, PlanAndTraceOutputsNeverOverwriteInputsOrEachOther) {
  TempDir d;
  const Inputs in = make_inputs(d);
  const std::vector<std::string> plan = cat({"plan", "--batch", "2"}, kModel);
  refused(run_remat(cat(plan, {"--step-budget", "1GiB", "--out", d / "x", "--svg", d / "x"})),
          {"--out and --svg", "same path"});
  const std::string text = slurp(in.data);
  refused(run_remat(cat(plan, {"--data", in.data, "--svg", in.data})), {"--svg", "--data", "t.txt"});
  EXPECT_EQ(slurp(in.data), text);
  const RunResult cal = run_remat(cat({"calibrate", "--batch", "2", "--repeats", "1", "--untimed-rounds", "0", "--quiet",
                                       "--out", d / "cal.json"}, kModel));
  ASSERT_EQ(cal.exit_code, 0) << cal.describe();
  const std::string calibration = slurp(d / "cal.json");
  refused(run_remat(cat(plan, {"--step-budget", "1GiB", "--calibration", d / "cal.json", "--out", d / "cal.json"})),
          {"--out", "--calibration", "cal.json"});
  EXPECT_EQ(slurp(d / "cal.json"), calibration);
  const RunResult p = run_remat(cat(plan, {"--step-budget", "1GiB", "--out", d / "p.json"}));
  ASSERT_EQ(p.exit_code, 0) << p.describe();
  const std::string plan_text = slurp(d / "p.json");
  refused(run_remat(cat({"trace", "--batch", "2"}, cat(kModel, {"--plan", d / "p.json", "--svg", d / "p.json"}))),
          {"--svg", "--plan", "p.json"});
  EXPECT_EQ(slurp(d / "p.json"), plan_text);
  EXPECT_FALSE(fs::exists(d / "x"));
}

// (11) /dev/stderr, /dev/stdout (and the file a stream is redirected to) are refused as files, so the
// user's log is kept; "-" streams --metrics-out and --report-json to stdout.
TEST(CliOutputs, StandardStreamsAreNotFilesAndDashIsStdout) {
  TempDir d;
  const std::string log = d.write("log", "keep\n"), out = d.write("out", "keep\n");
  EXPECT_EQ(shell(remat_tiny_line("--metrics-out /dev/stderr 2>>" + log + " >/dev/null")), 1);
  EXPECT_EQ(slurp(log).rfind("keep\n", 0), 0u) << slurp(log);
  EXPECT_NE(slurp(log).find("--metrics-out '/dev/stderr'"), std::string::npos) << slurp(log);
  EXPECT_NE(slurp(log).find("--metrics-out -"), std::string::npos) << "the hint names -: " << slurp(log);
  EXPECT_EQ(shell(remat_tiny_line("--report-json /dev/stdout >>" + out + " 2>/dev/null")), 1);
  EXPECT_EQ(slurp(out), "keep\n");
  EXPECT_EQ(shell(remat_tiny_line("--metrics-out " + log + " 2>>" + log + " >/dev/null")), 1);
  EXPECT_EQ(slurp(log).rfind("keep\n", 0), 0u) << slurp(log);
  refused(run_remat(tiny({"--metrics-out", "/proc/self/fd/1"})), {"--metrics-out", "/proc/self/fd/1", "-"});

  const RunResult r = run_remat(tiny({"--metrics-out", "-", "--report-json", "-"}), d.path());
  check_user_error(r, 1, {"--metrics-out and --report-json are the same path '-'"});
  const RunResult m = run_remat(tiny({"--metrics-out", "-"}), d.path());
  ASSERT_EQ(m.exit_code, 0) << m.describe();
  EXPECT_NE(m.out.find("{\"step\": 1, \"loss\": "), std::string::npos) << m.out;
  const RunResult j = run_remat(tiny({"--report-json", "-"}), d.path());
  ASSERT_EQ(j.exit_code, 0) << j.describe();
  const size_t brace = j.out.rfind("\n{\n");
  ASSERT_NE(brace, std::string::npos) << j.out;
  EXPECT_TRUE(nlohmann::json::parse(j.out.substr(brace + 1), nullptr, false).is_object()) << j.out.substr(brace);
  EXPECT_FALSE(fs::exists(d / "-")) << "'-' is stdout, not a file";
  refused(run_remat(tiny({"--save", "-"}), d.path()), {"--save", "stdout", "./-"});
}

// A read-only --save is refused (root could replace it), and kept.
TEST(CliOutputs, ReadOnlySaveIsRefused) {
  TempDir d;
  const std::string ro = d.write("ro.safetensors", "keep");
  ASSERT_EQ(chmod(ro.c_str(), 0444), 0);
  refused(run_remat(tiny({"--save", ro})), {"--save", "ro.safetensors", "read-only", "chmod"});
  EXPECT_EQ(slurp(ro), "keep");
}

// A refused command creates nothing: --save-dir X --save X used to leave an empty folder X.
TEST(CliOutputs, RefusedSaveDirCreatesNothing) {
  TempDir d;
  refused(run_remat(tiny({"--save-dir", d / "X", "--save", d / "X"})), {"--save and --save-dir", "same path"});
  refused(run_remat(tiny({"--save-dir", d / "ck/a", "--metrics-out", d / "nodir/m.jsonl"})), {"does not exist"});
  EXPECT_EQ(d.listing(), std::vector<std::string>{});
}

// --save-dir on a regular file says what it is.
TEST(CliOutputs, SaveDirOnAFileSaysSo) {
  TempDir d;
  const std::string file = d.write("plain", "x");
  const std::string line = check_user_error(run_remat(tiny({"--save-dir", file})), 1,
                                            {"--save-dir", "is a regular file, not a folder"});
  EXPECT_EQ(line.find("not a regular file"), std::string::npos) << line;
}

// A resumed run drops the metrics lines the interrupted run wrote past its checkpoint, then appends:
// each step once, in order, and no partial line.
TEST(CliOutputs, ResumeDropsMetricsPastTheCheckpoint) {
  TempDir d;
  const RunResult full = run_remat(cat(tiny_train(cat(kModel, {"--batch", "2", "--steps", "4"})),
                                       {"--save-every", "2", "--save-dir", d / "ck", "--metrics-out", d / "m.jsonl"}));
  ASSERT_EQ(full.exit_code, 0) << full.describe();
  ASSERT_TRUE(fs::is_directory(d / "ck/step-000002"));
  {  // an interrupted write: half a line at the end
    std::ofstream f(d / "m.jsonl", std::ios::app | std::ios::binary);
    f << "{\"step\": 5, \"lo";
  }
  // (Into another --save-dir: resuming step 2 into its own folder would overwrite the run's step 4.)
  const RunResult r = run_remat({"train", "--resume", d / "ck/step-000002", "--save-dir", d / "ck2", "--no-progress",
                                 "--metrics-out", d / "m.jsonl"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const std::string text = slurp(d / "m.jsonl");
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  std::vector<int64_t> steps;
  for (const std::string& line : split_lines(text)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    ASSERT_TRUE(j.is_object()) << line;
    steps.push_back(j["step"].get<int64_t>());
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4})) << text;
}

// On a full disk (here: past `ulimit -f`), the metrics file is cut back to its last complete line.
TEST(CliOutputs, MetricsNeverEndInAPartialLine) {
  TempDir d;
  Child c(cat(tiny_train(cat(kModel, {"--batch", "2", "--steps", "3"})), {"--metrics-out", d / "m.jsonl"}),
          SpawnOptions{"", 200});  // one line (~130 bytes) fits, the second crosses the limit
  const RunResult r = c.finish();
  SCOPED_TRACE(r.describe());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("File too large"), std::string::npos);
  const std::string text = slurp(d / "m.jsonl");
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n') << text;
  for (const std::string& line : split_lines(text)) EXPECT_TRUE(nlohmann::json::parse(line, nullptr, false).is_object()) << line;
}
