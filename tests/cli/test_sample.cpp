#include <algorithm>
// remat sample (load a model, continue a prompt), the sample a byte-level model prints after
// training on a token file, and remat train --compare-none (the report's measured step times).
#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "run.h"

using namespace remat_cli_test;
using nlohmann::json;

namespace {

bool has(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

RunResult ok(const std::vector<std::string>& args, const std::string& cwd = "") {
  RunResult r = run_remat(args, cwd);
  EXPECT_TRUE(r.exited() && r.exit_code == 0) << r.describe();
  return r;
}

// A user error: exit 1, one line on stderr in remat's format, nothing on stdout.
RunResult fails(const std::vector<std::string>& args) {
  RunResult r = run_remat(args);
  EXPECT_TRUE(r.exited() && r.exit_code == 1) << r.describe();
  EXPECT_EQ(split_lines(r.err).size(), 1u) << r.err;
  EXPECT_EQ(r.err.rfind("remat: [", 0), 0u) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  return r;
}

// The report's first line.
std::string headline(const std::string& out) {
  for (const std::string& l : split_lines(out))
    if (l.rfind("activations ", 0) == 0) return l;
  return "";
}

std::vector<double> losses(const std::string& metrics) {
  std::vector<double> r;
  for (const std::string& l : split_lines(metrics)) r.push_back(json::parse(l).at("loss").get<double>());
  return r;
}

// Models shared by the tests: a byte-level tiny GPT as a file and as a folder, and one with V = 512.
class SampleCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const RunResult a = run_remat(tiny_train({"--steps", "2", "--save", *dir_ / "m.safetensors"}));
    ASSERT_EQ(a.exit_code, 0) << a.describe();
    const RunResult b = run_remat(tiny_train({"--steps", "1", "--save", *dir_ / "folder"}));
    ASSERT_EQ(b.exit_code, 0) << b.describe();
    const RunResult c = run_remat(tiny_train({"--steps", "1", "--vocab", "512", "--save", *dir_ / "v512.safetensors"}));
    ASSERT_EQ(c.exit_code, 0) << c.describe();
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string model() { return *dir_ / "m.safetensors"; }
  static std::string folder() { return *dir_ / "folder"; }
  static std::string v512() { return *dir_ / "v512.safetensors"; }
  static TempDir* dir_;
};
TempDir* SampleCli::dir_ = nullptr;

}  // namespace

TEST_F(SampleCli, PrintsThePromptThenItsContinuation) {
  EXPECT_EQ(ok({"sample", "--init-from", model(), "--prompt", "ROMEO:", "--tokens", "0"}).out, "ROMEO:\n");
  const RunResult r = ok({"sample", "--init-from", model(), "--prompt", "ROMEO:", "--tokens", "40", "--seed", "5"});
  EXPECT_EQ(r.out.rfind("ROMEO:", 0), 0u) << r.out;
  EXPECT_GT(r.out.size(), std::string("ROMEO:\n").size() + 20) << r.out;
  // stderr has one line: the process's peak beside its prediction.
  EXPECT_EQ(r.err.rfind("remat sample: process peak ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("; predicted "), std::string::npos) << r.err;
  // Without --prompt: from a newline.
  EXPECT_EQ(ok({"sample", "--init-from", model(), "--tokens", "0"}).out, "\n\n");
}

TEST_F(SampleCli, DeterministicGivenTheSeed) {
  const std::vector<std::string> base{"sample", "--init-from", model(), "--prompt", "To be", "--tokens", "40",
                                      "--temperature", "1.0"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return ok(a).out;
  };
  const std::string s1 = with({"--seed", "1"});
  EXPECT_EQ(with({"--seed", "1"}), s1);
  EXPECT_NE(with({"--seed", "2"}), s1);
}

TEST_F(SampleCli, TopKOneIsGreedyAndAFolderLoadsLikeAFile) {
  const std::string greedy = ok({"sample", "--init-from", model(), "--prompt", "A", "--tokens", "30", "--temperature", "0"}).out;
  EXPECT_EQ(ok({"sample", "--init-from", model(), "--prompt", "A", "--tokens", "30", "--temperature", "1.5", "--top-k",
                "1", "--seed", "9"})
                .out,
            greedy);
  // The folder holds other weights; it loads, and greedy sampling from it is deterministic too.
  const std::string f = ok({"sample", "--init-from", folder(), "--prompt", "A", "--tokens", "10", "--temperature", "0"}).out;
  EXPECT_EQ(ok({"sample", "--init-from", folder(), "--prompt", "A", "--tokens", "10", "--temperature", "0"}).out, f);
  EXPECT_EQ(f.rfind("A", 0), 0u);
}

TEST_F(SampleCli, TokenIdsForVocabulariesThatAreNotBytes) {
  const RunResult r = ok({"sample", "--init-from", v512(), "--prompt-tokens", "300, 2", "--tokens", "5", "--seed", "3"});
  std::istringstream in(r.out);
  std::vector<long> ids;
  for (long id; in >> id;) ids.push_back(id);
  ASSERT_EQ(ids.size(), 7u) << r.out;
  EXPECT_EQ(ids[0], 300);
  EXPECT_EQ(ids[1], 2);
  for (long id : ids) EXPECT_TRUE(id >= 0 && id < 512) << id;
  // A byte-level model takes token ids too, and prints text.
  EXPECT_EQ(ok({"sample", "--init-from", model(), "--prompt-tokens", "72,105", "--tokens", "0"}).out, "Hi\n");
}

TEST_F(SampleCli, LongPromptIsCroppedWithANote) {
  const std::string prompt(100, 'a');  // tiny's block size is 64
  const RunResult r = ok({"sample", "--init-from", model(), "--prompt", prompt, "--tokens", "3"});
  EXPECT_TRUE(has(r.err, "note: the prompt has 100 tokens, more than the block size 64: the model sees only its last 64"))
      << r.err;
  EXPECT_EQ(r.out.rfind(prompt, 0), 0u);
}

TEST_F(SampleCli, BadRequestsAreOneLineErrors) {
  const std::string m = model();
  EXPECT_TRUE(has(fails({"sample", "--init-from", m, "--temperature", "-1"}).err, "--temperature must be a number >= 0"));
  EXPECT_TRUE(has(fails({"sample", "--init-from", m, "--top-k", "257"}).err,
                  "--top-k must be between 0 and the vocabulary size 256, got 257"));
  EXPECT_TRUE(has(fails({"sample", "--init-from", m, "--top-k", "-1"}).err, "--top-k must be between"));
  EXPECT_TRUE(has(fails({"sample", "--init-from", m, "--tokens", "-5"}).err, "--tokens must be >= 0"));
  EXPECT_TRUE(has(fails({"sample", "--init-from", *dir_ / "missing.safetensors"}).err, "missing.safetensors"));
  EXPECT_TRUE(has(fails({"sample", "--prompt", "x"}).err, "remat sample needs --init-from"));
  const std::string not_bytes = fails({"sample", "--init-from", v512(), "--prompt", "hello"}).err;
  EXPECT_TRUE(has(not_bytes, "vocabulary of 512 tokens, not bytes")) << not_bytes;
  EXPECT_TRUE(has(not_bytes, "--prompt-tokens")) << not_bytes;
  EXPECT_TRUE(has(fails({"sample", "--init-from", v512()}).err, "--prompt-tokens"));
  EXPECT_TRUE(has(fails({"sample", "--init-from", v512(), "--prompt-tokens", "1,,2"}).err, "not a list of token ids"));
  EXPECT_TRUE(has(fails({"sample", "--init-from", v512(), "--prompt-tokens", "600"}).err, "token 600 is outside"));
  EXPECT_TRUE(has(fails({"sample", "--init-from", m, "--prompt", ""}).err, "--prompt is empty"));
  EXPECT_TRUE(has(fails({"sample", "--init-from", m, "--prompt", "a", "--prompt-tokens", "1"}).err, "cannot be combined"));
}

// ---- the sample printed after training ----

TEST(TrainSample, ByteLevelModelPrintsTextEvenFromATokenFile) {
  TempDir d;
  std::vector<uint16_t> toks;
  const std::string text = "the quick brown fox jumps over the lazy dog\n";
  while (toks.size() < 20000)
    for (char c : text) toks.push_back(uint16_t(static_cast<unsigned char>(c)));
  const std::string bin = d.write("tok.bin", std::string(reinterpret_cast<const char*>(toks.data()), toks.size() * 2));
  const RunResult r = ok({"train", "--preset", "tiny", "--steps", "1", "--eval-every", "0", "--no-progress", "--data",
                          bin, "--sample-tokens", "20"});
  const auto lines = split_lines(r.out);
  size_t i = 0;
  while (i < lines.size() && lines[i] != "sample:") ++i;
  ASSERT_LT(i + 1, lines.size()) << r.out;
  EXPECT_EQ(lines[i + 1].rfind("(token ids)", 0), std::string::npos) << lines[i + 1];
}

// ---- remat train --compare-none ----

TEST(CompareNone, MeasuresStepTimesWithoutTouchingTheRun) {
  TempDir d;
  auto train = [&](const std::string& tag, bool compare) {
    std::vector<std::string> extra{"--steps", "2", "--recompute", "block", "--save", d / (tag + ".safetensors"),
                                   "--metrics-out", d / (tag + ".jsonl"), "--report-json", d / (tag + ".json")};
    if (compare) extra.push_back("--compare-none");
    return ok(tiny_train(extra), d.path());
  };
  const RunResult with = train("with", true), without = train("without", false);
  const std::string h = headline(with.out), h0 = headline(without.out);
  EXPECT_TRUE(has(h, " MiB instead of ") && has(h, "% against store-everything [")) << h;
  EXPECT_TRUE(has(h, "step time: measured, median of 3 step(s) each on the same batches")) << h;
  EXPECT_TRUE(has(h0, "not measured: rerun with --compare-none")) << h0;
  // The headline is the report's first line.
  const auto lines = split_lines(with.out);
  for (size_t i = 0; i + 1 < lines.size(); ++i)
    if (lines[i + 1].rfind("== memory report:", 0) == 0) {
      EXPECT_EQ(lines[i], h);
    }
  const json j = json::parse(slurp(d / "with.json")), j0 = json::parse(slurp(d / "without.json"));
  EXPECT_GT(j.at("step_time_overhead_measured").get<double>(), 0.0);
  EXPECT_GT(j.at("store_all_step_time_s_measured").get<double>(), 0.0);
  EXPECT_GT(j.at("step_time_s_measured").get<double>(), 0.0);
  EXPECT_EQ(j.at("store_all_activation_bytes_measured").get<size_t>(),
            j.at("store_all_activation_bytes_predicted").get<size_t>());
  EXPECT_TRUE(j0.at("step_time_overhead_measured").is_null());
  // The run itself is the same: weights, losses, activation figures.
  EXPECT_EQ(slurp(d / "with.safetensors"), slurp(d / "without.safetensors"));
  EXPECT_EQ(losses(slurp(d / "with.jsonl")), losses(slurp(d / "without.jsonl")));
  EXPECT_EQ(j.at("peak_activation_bytes"), j0.at("peak_activation_bytes"));
  EXPECT_EQ(j.at("category_peak_bytes"), j0.at("category_peak_bytes"));
}

TEST(CompareNone, NeedsATrainingStep) {
  TempDir d;
  ok(tiny_train({"--steps", "1", "--save", d / "w.safetensors"}));
  const RunResult r = run_remat(tiny_train({"--steps", "0", "--init-from", d / "w.safetensors", "--compare-none"}));
  EXPECT_EQ(r.exit_code, 1) << r.describe();
  EXPECT_TRUE(has(r.err, "--compare-none needs at least one step")) << r.err;
}

// A training checkpoint samples as the weights it holds: its save dir (the newest step folder) and a
// step folder give the same greedy text as the step's weights file, and the save dir follows the
// newest step (another checkpoint's weights give other text).
TEST(SampleCheckpoint, ASaveDirOrAStepFolderSamplesItsWeights) {
  TempDir dir;
  const std::string ck = dir / "ck";
  RunResult t = run_remat(tiny_train({"--steps", "4", "--save-dir", ck, "--save-every", "2", "--keep", "2", "--lr", "0.01"}));
  ASSERT_EQ(t.exit_code, 0) << t.describe();
  auto greedy = [](const std::string& from) {
    return ok({"sample", "--init-from", from, "--prompt", "A", "--tokens", "40", "--temperature", "0"}).out;
  };
  const std::string step4 = greedy(ck + "/step-000004/weights.safetensors");
  EXPECT_EQ(greedy(ck + "/step-000004"), step4);
  EXPECT_EQ(greedy(ck), step4);
  EXPECT_NE(greedy(ck + "/step-000002"), step4) << "two checkpoints of a learning run sample alike: the test cannot tell them apart";
  // train --init-from reads the same weights from the save dir as from the step's file: --steps 0
  // evaluates them, and the val loss is the same.
  auto val = [](const std::string& from) {
    const RunResult r = ok(tiny_train({"--init-from", from, "--steps", "0"}));
    for (const std::string& l : split_lines(r.out))
      if (l.rfind("val loss", 0) == 0) return l;
    return std::string("no val loss line: ") + r.out;
  };
  const std::string v4 = val(ck + "/step-000004/weights.safetensors");
  EXPECT_EQ(val(ck), v4);
  EXPECT_NE(val(ck + "/step-000002"), v4);
  // A folder that is neither a model nor a checkpoint still says what it expects.
  const RunResult e = fails({"sample", "--init-from", dir / "", "--tokens", "3"});
  EXPECT_TRUE(has(e.err, "model.safetensors")) << e.err;
}
