// Every signal that ends a run ends it cleanly, whatever the run is doing: signal x phase. Each signal
// is sent at an exact point (REMAT_TEST_SIGNAL, core/signal_point.h: the process sends it to itself
// and waits until it is taken, as a kill(1) from outside would land). Each run exits with 128 + the
// signal's number, and the weights it leaves resume bit-identically: the final --save of the
// resumed run equals an uninterrupted run's, byte for byte.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>

#include "run.h"

namespace {

using namespace remat_cli_test;

const std::vector<std::string> kRun = {"--steps", "4", "--dropout", "0.1", "--batch", "2", "--seq", "32",
                                       "--eval-every", "2", "--eval-batches", "2"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// `remat train` with the run's flags, the sample on, and REMAT_TEST_SIGNAL set to `injection` ("" for
// none). The child inherits the variable; tests in one binary run one at a time.
RunResult train(const std::vector<std::string>& extra, const std::string& injection) {
  std::vector<std::string> a{"train", "--preset", "tiny", "--sample-tokens", "6", "--no-progress"};
  a = with(with(a, kRun), extra);
  if (!injection.empty()) ::setenv("REMAT_TEST_SIGNAL", injection.c_str(), 1);
  RunResult r = run_remat(a);
  ::unsetenv("REMAT_TEST_SIGNAL");
  return r;
}

struct Phase {
  const char* name;
  const char* point;  // the signal point and which pass of it: "step:<sig>:2" = during step 2
  int nth;
};

// The points, each hit once: step 2 (its checkpoint comes at step 2), the evaluation after step 2
// (the first evaluation runs 2 batches before training, so the 3rd batch point), the checkpoint
// save at step 2, the end-of-run sample (all steps done and saved), and the scan of the data before
// training (nothing trained: nothing may be written).
const Phase kPhases[] = {{"step", "step", 2}, {"validation", "validation", 3}, {"save", "save", 1},
                         {"sample", "sample", 3}, {"scan", "scan", 1}};
const int kSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGXCPU};

class Signals : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(Signals, EndCleanlyAndResumeBitIdentical) {
  const int sig = kSignals[std::get<0>(GetParam())];
  const Phase ph = kPhases[std::get<1>(GetParam())];
  TempDir d;
  const RunResult full = train({"--save", d / "full.safetensors"}, "");
  ASSERT_EQ(full.exit_code, 0) << full.describe();

  const std::string inj = std::string(ph.point) + ":" + std::to_string(sig) + ":" + std::to_string(ph.nth);
  const RunResult r = train({"--save-dir", d / "ck", "--save-every", "2", "--save", d / "w.safetensors"}, inj);
  SCOPED_TRACE(r.describe());
  EXPECT_EQ(r.signal, 0) << "the signal killed the run";
  EXPECT_EQ(r.exit_code, 128 + sig);
  EXPECT_EQ(r.err.find("internal error"), std::string::npos);
  if (std::string(ph.name) == "scan") {  // before training: nothing written, the data untouched
    EXPECT_NE(r.err.find("before training began: nothing was trained or written"), std::string::npos);
    EXPECT_FALSE(fs::exists(d / "w.safetensors"));
    EXPECT_FALSE(fs::exists(d / "ck/step-000000"));
    return;
  }
  EXPECT_NE(r.err.find("interrupted at step"), std::string::npos);
  ASSERT_TRUE(fs::exists(d / "w.safetensors")) << "--save not written";
  for (const auto& e : fs::directory_iterator(d / "ck"))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << "a temporary was left behind";
  if (std::string(ph.name) == "sample") {  // every step ran and was saved before the sample
    EXPECT_EQ(slurp(d / "w.safetensors"), slurp(d / "full.safetensors"));
    return;
  }
  // Resume the rest, then compare with the uninterrupted run.
  const RunResult res = train({"--resume", d / "ck", "--save", d / "resumed.safetensors"}, "");
  ASSERT_EQ(res.exit_code, 0) << res.describe();
  EXPECT_EQ(slurp(d / "resumed.safetensors"), slurp(d / "full.safetensors")) << "the resumed weights differ";
}

INSTANTIATE_TEST_SUITE_P(Matrix, Signals, ::testing::Combine(::testing::Range(0, 5), ::testing::Range(0, 5)),
                         [](const auto& info) {
                           return std::string(sigabbrev_np(kSignals[std::get<0>(info.param)])) + "_" +
                                  kPhases[std::get<1>(info.param)].name;
                         });

// The scan of a resumed run: the checkpoint on disk is what it was, and resuming again finishes the
// run bit-identically.
TEST(SignalsResumed, TermWhileScanningLeavesTheCheckpointAsItWas) {
  TempDir d;
  const RunResult full = train({"--save", d / "full.safetensors"}, "");
  ASSERT_EQ(full.exit_code, 0) << full.describe();
  const RunResult first = train({"--save-dir", d / "ck", "--save-every", "2"}, "step:" + std::to_string(SIGTERM) + ":2");
  ASSERT_EQ(first.exit_code, 143) << first.describe();
  const std::string before = slurp(d / "ck/step-000002/state.json");
  ASSERT_FALSE(before.empty());
  const RunResult scan = train({"--resume", d / "ck"}, "scan:" + std::to_string(SIGTERM) + ":1");
  EXPECT_EQ(scan.exit_code, 143) << scan.describe();
  EXPECT_EQ(slurp(d / "ck/step-000002/state.json"), before);
  const RunResult res = train({"--resume", d / "ck", "--save", d / "resumed.safetensors"}, "");
  ASSERT_EQ(res.exit_code, 0) << res.describe();
  EXPECT_EQ(slurp(d / "resumed.safetensors"), slurp(d / "full.safetensors"));
}

// `remat train ... | head`: the reader goes away before the report. The run still writes its weights
// and checkpoint, and ends silently with SIGPIPE's conventional status, as any filter does.
TEST(SignalsResumed, AClosedPipeOnStdoutEndsWith141AfterSaving) {
  TempDir d;
  const std::string cmd = "bash -c '" + std::string(REMAT_BINARY) +
                          " train --preset tiny --steps 2 --sample-tokens 0 --no-progress --save " + (d / "w.safetensors") +
                          " --save-dir " + (d / "ck") + " 2>" + (d / "err.txt") +
                          " | true; echo \"${PIPESTATUS[0]}\"'";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[64] = "";
  const bool got = std::fgets(buf, sizeof buf, p) != nullptr;
  ::pclose(p);
  ASSERT_TRUE(got);
  EXPECT_EQ(std::string(buf), "141\n") << slurp(d / "err.txt");
  EXPECT_TRUE(fs::exists(d / "w.safetensors"));
  EXPECT_TRUE(fs::exists(d / "ck/step-000002/state.json"));
  EXPECT_EQ(slurp(d / "err.txt").find("stdout"), std::string::npos) << "a closed pipe is not an error to report";
}

}  // namespace
