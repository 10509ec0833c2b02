// Runs that survive, through the command line: SIGINT / SIGTERM finish the step, save and exit 130 /
// 143, and a resumed run ends bit-identical to an uninterrupted one; outputs are checked before
// training (devices, FIFOs, the data file, two outputs on one path, symlinks followed); divergence
// stops with the step named, or is skipped; a write past `ulimit -f` is an error, not a silent kill;
// --resume refuses flags that contradict the checkpoint.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "run.h"

namespace {

using namespace remat_cli_test;

// The one-line user-error contract of the CLI (run.h), refused before training.
void expect_user_error(const RunResult& r, const std::vector<std::string>& needles) {
  check_user_error(r, 1, needles);
  EXPECT_EQ(r.out.find("step 1"), std::string::npos) << "refused before training";
}

RunResult train(std::vector<std::string> extra, const std::string& cwd = "") {
  return run_remat(tiny_train(std::move(extra)), cwd);
}

const std::vector<std::string> kRun = {"--steps", "60", "--dropout", "0.1", "--recompute", "block", "--policy",
                                       "selective", "--batch", "4", "--micro-batch", "2", "--seq", "32"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST(CliRobust, SigintSavesAndResumeIsBitIdentical) {
  TempDir d;
  const auto full = train(with(kRun, {"--save", d / "full.safetensors", "--metrics-out", d / "full.jsonl"}));
  ASSERT_EQ(full.exit_code, 0) << full.describe();

  Child c(tiny_train(with(kRun, {"--save-dir", d / "ck", "--save-every", "5", "--metrics-out", d / "m.jsonl",
                                 "--save", d / "part.safetensors"})));
  ASSERT_TRUE(c.wait_for_lines(d / "m.jsonl", 1));
  c.signal(SIGINT);
  const RunResult r = c.finish();
  ASSERT_EQ(r.exit_code, 130) << r.describe();
  EXPECT_NE(r.err.find("interrupted at step "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("saved weights to " + d / "part.safetensors"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("checkpoint " + d / "ck/step-"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::exists(d / "part.safetensors"));
  const size_t done = split_lines(slurp(d / "m.jsonl")).size();
  ASSERT_LT(done, 60u) << "the run ended before the signal: the test is vacuous";
  EXPECT_NE(r.err.find("interrupted at step " + std::to_string(done) + ":"), std::string::npos) << r.err;

  // Resume from the save dir with only the tiny defaults on the command line.
  const auto res = train({"--resume", d / "ck", "--save", d / "resumed.safetensors", "--metrics-out", d / "m.jsonl"});
  ASSERT_EQ(res.exit_code, 0) << res.describe();
  EXPECT_NE(res.out.find("resuming from"), std::string::npos);
  EXPECT_EQ(slurp(d / "resumed.safetensors"), slurp(d / "full.safetensors")) << "final weights differ";
  // The metrics file continues where it stopped: the losses match the uninterrupted run line by line.
  const auto a = split_lines(slurp(d / "full.jsonl")), b = split_lines(slurp(d / "m.jsonl"));
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(nlohmann::json::parse(a[i]).at("loss"), nlohmann::json::parse(b[i]).at("loss")) << "line " << i;
}

TEST(CliRobust, SigtermExits143AndSecondSigintExitsAtOnce) {
  TempDir d;
  {
    Child c(tiny_train({"--steps", "100000", "--metrics-out", d / "m.jsonl"}));
    ASSERT_TRUE(c.wait_for_lines(d / "m.jsonl", 1));
    c.signal(SIGTERM);
    const RunResult r = c.finish();
    EXPECT_EQ(r.exit_code, 143) << r.describe();
    EXPECT_NE(r.err.find("interrupted at step"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("saved nothing"), std::string::npos) << r.err;
  }
  {
    Child c(tiny_train({"--steps", "100000", "--metrics-out", d / "m2.jsonl"}));
    ASSERT_TRUE(c.wait_for_lines(d / "m2.jsonl", 1));
    c.signal(SIGINT);
    c.signal(SIGINT);
    const RunResult r = c.finish();
    EXPECT_EQ(r.signal, 0);
    EXPECT_EQ(r.exit_code, 130) << r.describe();
  }
}

TEST(CliRobust, WritePastFileSizeLimitIsAnError) {
  TempDir d;
  Child c(tiny_train({"--steps", "1", "--save", d / "w.safetensors"}), SpawnOptions{"", 64 * 1024});
  const RunResult r = c.finish();
  SCOPED_TRACE(r.describe());
  EXPECT_EQ(r.signal, 0) << "SIGXFSZ must not kill the run";
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("[io]"), std::string::npos);
  EXPECT_NE(r.err.find("File too large"), std::string::npos);
  EXPECT_NE(r.err.find("ulimit -f"), std::string::npos);
  EXPECT_FALSE(fs::exists(d / "w.safetensors"));
}

// A metrics write that fails mid-run (here: past `ulimit -f`, as a full disk would) does not lose the
// run: a warning at once, training goes on, --save and the checkpoints are written, and the run exits 1
// naming the metrics file. The resumed weights equal an uninterrupted run's, so nothing was skipped.
TEST(CliRobust, MetricsWriteFailureStillSavesTheWeights) {
  TempDir d;
  const std::vector<std::string> run = {"--steps", "6", "--dropout", "0.1", "--batch", "2", "--seq", "32"};
  const auto full = train(with(run, {"--save", d / "full.safetensors"}));
  ASSERT_EQ(full.exit_code, 0) << full.describe();
  const auto part = train(with(run, {"--save-dir", d / "ck", "--save-every", "3", "--keep", "2", "--metrics-out",
                                     d / "m.jsonl"}));
  ASSERT_EQ(part.exit_code, 0) << part.describe();
  std::string first;  // the step-3 checkpoint
  for (const auto& e : fs::directory_iterator(d / "ck"))
    if (first.empty() || e.path().string() < first) first = e.path().string();
  ASSERT_NE(first.find("step-"), std::string::npos) << first;
  // The metrics file ends just under the limit: the resumed run's first line crosses it. It holds
  // the lines up to the checkpoint (the resumed run drops the later ones) and a line of padding.
  const rlim_t limit = 8u << 20;
  const auto lines = split_lines(slurp(d / "m.jsonl"));
  ASSERT_GE(lines.size(), 3u);
  std::string kept = lines[0] + "\n" + lines[1] + "\n" + lines[2] + "\n";
  kept += std::string(limit - 16 - kept.size() - 1, ' ') + "\n";
  std::ofstream(d / "m.jsonl", std::ios::binary | std::ios::trunc) << kept;
  // (Into another --save-dir: resuming step 3 into its own folder would overwrite the run's step 6.)
  Child c(tiny_train({"--resume", first, "--save-dir", d / "ck2", "--save", d / "resumed.safetensors", "--metrics-out",
                      d / "m.jsonl"}),
          SpawnOptions{"", limit});
  const RunResult r = c.finish();
  SCOPED_TRACE(r.describe());
  EXPECT_EQ(r.signal, 0);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("warning: writing --metrics-out"), std::string::npos);
  EXPECT_NE(r.err.find("File too large"), std::string::npos);
  EXPECT_NE(r.err.find("the run finished and saved"), std::string::npos);
  ASSERT_TRUE(fs::exists(d / "resumed.safetensors"));
  EXPECT_EQ(slurp(d / "resumed.safetensors"), slurp(d / "full.safetensors")) << "the resumed run did not finish";
}

TEST(CliRobust, OutputsCheckedBeforeTraining) {
  TempDir d;
  ASSERT_EQ(mkfifo((d / "fifo").c_str(), 0600), 0);
  expect_user_error(train({"--steps", "1", "--save", d / "fifo"}), {"--save", "a FIFO, not a regular file"});
  expect_user_error(train({"--steps", "1", "--metrics-out", "/dev/null"}), {"--metrics-out", "character device"});
  expect_user_error(train({"--steps", "1", "--report-json", "/dev/full"}), {"--report-json", "character device"});
  expect_user_error(train({"--steps", "1", "--save", d / "x.safetensors", "--metrics-out", d / "x.safetensors"}),
                    {"--save and --metrics-out are the same path"});
  expect_user_error(train({"--steps", "1", "--metrics-out", d / "a.json", "--report-json", d.path() + "/./a.json"}),
                    {"--metrics-out and --report-json are the same path"});
  const std::string data = d.write("corpus.txt", std::string(5000, 'a'));
  expect_user_error(train({"--steps", "1", "--data", data, "--metrics-out", data}),
                    {"--metrics-out", "is also the input --data"});
  EXPECT_EQ(slurp(data), std::string(5000, 'a'));
  fs::create_symlink(data, d / "data-link.txt");
  expect_user_error(train({"--steps", "1", "--data", data, "--save", d / "data-link.txt"}),
                    {"--save", "is also the input --data"});
  const std::string file = d.write("plain", "x");
  expect_user_error(train({"--steps", "1", "--save-dir", file}), {"--save-dir", "not a folder"});
  expect_user_error(train({"--steps", "1", "--save", d / "no/such/dir/w.safetensors"}), {"does not exist"});
  if (geteuid() != 0) {
    fs::create_directories(d / "ro");
    chmod((d / "ro").c_str(), 0500);
    expect_user_error(train({"--steps", "1", "--metrics-out", d / "ro/m.jsonl"}), {"--metrics-out", "read-only"});
    chmod((d / "ro").c_str(), 0700);
  }
  // Nothing was created by the refused runs.
  EXPECT_EQ(d.listing(), (std::vector<std::string>{"corpus.txt", "data-link.txt", "fifo", "plain"}));
}

TEST(CliRobust, SymlinkOutputWritesItsTarget) {
  TempDir d;
  d.write("real.safetensors", "old");
  fs::create_symlink(d / "real.safetensors", d / "link.safetensors");
  const auto r = train({"--steps", "1", "--save", d / "link.safetensors"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_TRUE(fs::is_symlink(d / "link.safetensors"));
  EXPECT_GT(fs::file_size(d / "real.safetensors"), 1000u);
}

TEST(CliRobust, DivergenceStopsNamingTheStep) {
  TempDir d;
  const std::vector<std::string> bad{"--lr", "1e4", "--warmup", "0", "--clip", "0"};
  const auto r = train(with(bad, {"--steps", "40", "--save", d / "w.safetensors", "--metrics-out", d / "m.jsonl"}));
  SCOPED_TRACE(r.describe());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(" became nan at step "), std::string::npos);
  EXPECT_NE(r.err.find("--skip-nonfinite"), std::string::npos);
  EXPECT_EQ(split_lines(r.err).size(), 1u);
  EXPECT_FALSE(fs::exists(d / "w.safetensors"));
  const auto lines = split_lines(slurp(d / "m.jsonl"));
  ASSERT_FALSE(lines.empty());
  for (const auto& l : lines) EXPECT_TRUE(nlohmann::json::accept(l)) << l;
  EXPECT_NE(lines.back().find("\"loss\": null"), std::string::npos) << lines.back();
  EXPECT_NE(lines.back().find("\"nonfinite\": true"), std::string::npos) << lines.back();

  const auto s = train(with(bad, {"--steps", "12", "--skip-nonfinite", "--save", d / "w.safetensors"}));
  EXPECT_EQ(s.exit_code, 0) << s.describe();
  EXPECT_NE(s.err.find("update skipped"), std::string::npos) << s.err;
  EXPECT_NE(s.out.find("skipped as non-finite"), std::string::npos) << s.out;
  EXPECT_TRUE(fs::exists(d / "w.safetensors"));
}

TEST(CliRobust, ResumeFlagErrors) {
  TempDir d;
  const auto first = train({"--steps", "2", "--save-dir", d / "ck", "--seq", "32"});
  ASSERT_EQ(first.exit_code, 0) << first.describe();
  EXPECT_NE(first.out.find("checkpoint written to " + d / "ck/step-000002"), std::string::npos) << first.out;
  expect_user_error(train({"--resume", d / "ck", "--layers", "3"}), {"contradicts the checkpoint", "--layers 3 (the checkpoint has 2)"});
  expect_user_error(train({"--resume", d / "ck", "--seq", "16"}), {"contradicts the checkpoint", "--seq 16 (the checkpoint has 32)"});
  expect_user_error(train({"--resume", d / "ck", "--lr", "0.5"}), {"--lr 0.5 (the checkpoint has 0.001)"});
  expect_user_error(train({"--resume", d / "ck", "--seed", "3"}), {"--seed 3 (the checkpoint has 1337)"});
  expect_user_error(run_remat({"train", "--resume", d / "ck", "--preset", "small", "--no-progress"}),
                    {"contradicts the checkpoint", "--preset small (the checkpoint has"});
  expect_user_error(train({"--resume", d / "ck", "--data", d.write("t.txt", std::string(3000, 'b'))}),
                    {"contradicts the checkpoint", "--data", "(the checkpoint has the built-in corpus)"});
  expect_user_error(train({"--resume", d / "ck", "--steps", "1"}), {"below the checkpoint's step 2"});
  expect_user_error(train({"--resume", d / "nope"}), {"--resume", "not a folder"});
  fs::create_directories(d / "empty");
  expect_user_error(train({"--resume", d / "empty"}), {"no checkpoint in"});
  expect_user_error(train({"--resume", d / "ck", "--init-from", d / "ck/step-000002/weights.safetensors"}),
                    {"--resume and --init-from"});
  expect_user_error(train({"--steps", "1", "--save-every", "2"}), {"--save-every needs --save-dir"});
  expect_user_error(train({"--steps", "1", "--save-dir", d / "k", "--keep", "0"}), {"--keep must be at least 1"});
  // Raising --steps and changing the strategy are allowed; checkpoints continue in the same folder.
  // Two contradictions: one line naming both.
  check_user_error(train({"--resume", d / "ck", "--layers", "3", "--lr", "0.5"}), 1,
                   {"--layers 3 (the checkpoint has 2)", "--lr 0.5 (the checkpoint has 0.001)"});
  // (Step 3 is still in the warmup of 20 steps: its learning rate is the same for any --steps.)
  const auto more = train({"--resume", d / "ck", "--steps", "3", "--recompute", "all"});
  EXPECT_EQ(more.exit_code, 0) << more.describe();
  EXPECT_NE(more.out.find("strategy all"), std::string::npos) << more.out;
  EXPECT_TRUE(fs::exists(d / "ck/step-000003/state.json"));
}

// --resume validates on the checkpoint's split: --val-fraction (and --val-data) come from it, and an
// explicit value that contradicts it is refused like any other run flag.
TEST(CliRobust, ResumeKeepsTheValidationSplit) {
  TempDir d;
  // Validation after steps 2 and 4 (--eval-every is not part of the run's state: given each time).
  auto run = [](const std::vector<std::string>& extra) {
    return run_remat(with({"train", "--preset", "tiny", "--sample-tokens", "0", "--no-progress", "--eval-every", "2",
                           "--eval-batches", "2"},
                          extra));
  };
  const auto full = run({"--steps", "4", "--seq", "32", "--val-fraction", "0.2", "--metrics-out", d / "full.jsonl"});
  ASSERT_EQ(full.exit_code, 0) << full.describe();
  const auto first = run({"--steps", "2", "--seq", "32", "--val-fraction", "0.2", "--save-dir", d / "ck"});
  ASSERT_EQ(first.exit_code, 0) << first.describe();

  expect_user_error(train({"--resume", d / "ck", "--steps", "4", "--val-fraction", "0.3"}),
                    {"contradicts the checkpoint", "--val-fraction 0.3 (the checkpoint has 0.2)"});
  expect_user_error(train({"--resume", d / "ck", "--steps", "4", "--val-fraction", "0.1"}),
                    {"--val-fraction 0.1 (the checkpoint has 0.2)"});
  const std::string val = d.write("v.txt", std::string(3000, 'v'));
  expect_user_error(train({"--resume", d / "ck", "--steps", "4", "--val-data", val}),
                    {"contradicts the checkpoint", "--val-data", "(the checkpoint has no --val-data)"});

  // No validation flag: the checkpoint's split, and the uninterrupted run's val loss after step 4.
  const auto res = run({"--resume", d / "ck", "--steps", "4", "--metrics-out", d / "m.jsonl"});
  ASSERT_EQ(res.exit_code, 0) << res.describe();
  EXPECT_NE(res.out.find("--val-fraction 0.2)"), std::string::npos) << res.out;
  const auto a = split_lines(slurp(d / "full.jsonl")), b = split_lines(slurp(d / "m.jsonl"));
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 2u) << "steps 3 and 4";
  const auto last_a = nlohmann::json::parse(a.back()), last_b = nlohmann::json::parse(b.back());
  ASSERT_TRUE(last_a.contains("val_loss")) << a.back();
  EXPECT_EQ(last_a.at("val_loss"), last_b.at("val_loss"));
  EXPECT_EQ(last_a.at("loss"), last_b.at("loss"));
}
