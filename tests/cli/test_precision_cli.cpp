// --precision, --fp32-residual and --save-dtype on the command line: bf16 runs end to end with the
// report's prediction equal to the measurement, bf16 weight files written and read back, and every
// bad value refused in one line with a hint.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "run.h"

namespace {

using namespace remat_cli_test;

RunResult train(std::vector<std::string> extra) { return run_remat(tiny_train(std::move(extra))); }

void expect_user_error(const RunResult& r, const std::vector<std::string>& needles) {
  check_user_error(r, 1, needles);
}

TEST(CliPrecision, Fp16IsRefusedOnEveryModelCommand) {
  for (const std::string cmd : {"train", "plan", "bench", "trace"}) {
    SCOPED_TRACE(cmd);
    std::vector<std::string> args{cmd, "--preset", "tiny", "--precision", "fp16"};
    if (cmd == "train") args = tiny_train({"--steps", "1", "--precision", "fp16"});
    expect_user_error(run_remat(args), {"[config]", "--precision fp16 is not supported", "--precision bf16"});
  }
  expect_user_error(train({"--steps", "1", "--precision", "fp8"}), {"unknown --precision 'fp8'", "fp32", "bf16"});
}

TEST(CliPrecision, Fp32ResidualNeedsBf16) {
  expect_user_error(train({"--steps", "1", "--fp32-residual"}), {"--fp32-residual", "--precision bf16"});
  expect_user_error(run_remat({"plan", "--preset", "tiny", "--fp32-residual", "--precision", "fp32"}),
                    {"--fp32-residual", "--precision bf16"});
}

TEST(CliPrecision, SaveDtypeIsCheckedBeforeTraining) {
  TempDir d;
  const RunResult a = train({"--steps", "1", "--save", d / "w.safetensors", "--save-dtype", "fp16"});
  expect_user_error(a, {"--save-dtype fp16 is not supported", "--save-dtype bf16"});
  EXPECT_EQ(a.out.find("step 1/1"), std::string::npos) << "refused before training";
  expect_user_error(train({"--steps", "1", "--save-dtype", "bf16"}), {"--save-dtype", "--save is not given"});
}

TEST(CliPrecision, Bf16TrainsSavesBf16AndReloads) {
  TempDir d;
  for (const std::string extra : {"", "--fp32-residual"}) {
    SCOPED_TRACE(extra);
    std::vector<std::string> args{"--steps", "2", "--precision", "bf16", "--recompute", "sqrt", "--dropout", "0.1",
                                  "--save", d / "w.safetensors", "--save-dtype", "bf16"};
    if (!extra.empty()) args.push_back(extra);
    const RunResult r = train(args);
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_NE(r.out.find("bf16"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("whole step: predicted = measured, to the byte"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("(equal to the byte)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("by dtype at that peak: f32"), std::string::npos) << r.out;
    // A BF16 file: its header says so.
    std::ifstream f(d / "w.safetensors", std::ios::binary);
    std::string head(4096, '\0');
    f.read(head.data(), std::streamsize(head.size()));
    EXPECT_NE(head.find("\"BF16\""), std::string::npos);
    EXPECT_EQ(head.find("\"F32\""), std::string::npos);
    // ... that trains on, in either precision.
    for (const std::string prec : {"bf16", "fp32"}) {
      const RunResult again = train({"--steps", "1", "--precision", prec, "--init-from", d / "w.safetensors"});
      EXPECT_EQ(again.exit_code, 0) << again.describe();
    }
  }
}

TEST(CliPrecision, Bf16FileOfAnotherShapeIsRefused) {
  TempDir d;
  const RunResult r = train({"--steps", "1", "--precision", "bf16", "--save", d / "w.safetensors", "--save-dtype", "bf16"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  expect_user_error(train({"--steps", "1", "--precision", "bf16", "--init-from", d / "w.safetensors", "--hidden", "72"}),
                    {"[weights]", "BF16 tensor", "has shape", "expects", "--hidden"});
}

}  // namespace

namespace {

TEST(CliPrecision, PlanPrintsTheSpecsBoundaryInBf16) {
  // The usual figures: GPT-2 small at B=8, T=1024 has |x| = 6.3 M elements, 12 MiB in bf16; LLaMA-7B
  // at B=8, T=4096 has 134 M elements, the usual "0.5 GB" being the fp32 size.
  const RunResult g = run_remat({"plan", "--precision", "bf16", "--preset", "gpt2", "--batch", "8", "--seq", "1024"});
  ASSERT_EQ(g.exit_code, 0) << g.describe();
  EXPECT_NE(g.out.find("|x| = 12.00 MiB (6.29 M elements, bf16)"), std::string::npos) << g.out;
  EXPECT_NE(g.out.find("store-everything, bf16 with fp32 norm statistics"), std::string::npos) << g.out;
  const RunResult f = run_remat({"plan", "--preset", "gpt2", "--batch", "8", "--seq", "1024"});
  ASSERT_EQ(f.exit_code, 0) << f.describe();
  EXPECT_NE(f.out.find("|x| = 24.00 MiB (6.29 M elements, f32)"), std::string::npos) << f.out;
  const RunResult l = run_remat({"plan", "--precision", "bf16", "--preset", "llama-7b"});
  ASSERT_EQ(l.exit_code, 0) << l.describe();
  EXPECT_NE(l.out.find("|x| = 256.00 MiB (134.22 M elements, bf16)"), std::string::npos) << l.out;
  EXPECT_NE(l.out.find("the usual 0.5 GB is the fp32 size"), std::string::npos) << l.out;
  const RunResult r = run_remat({"plan", "--precision", "bf16", "--fp32-residual", "--preset", "gpt2", "--batch", "8",
                                 "--seq", "1024"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find("|x| = 24.00 MiB (6.29 M elements, f32)"), std::string::npos) << "fp32 boundaries";
}

}  // namespace

namespace {

TEST(CliPrecision, BenchSaysWhichBf16PathRan) {
  const std::vector<std::string> args{"bench", "--preset", "tiny", "--recompute", "none", "--precision", "bf16",
                                      "--timed-steps", "1", "--untimed-steps", "0"};
  const RunResult r = run_remat(args);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find("bf16 matmul (oneDNN) measured"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bf16 paths: matmul "), std::string::npos) << r.out;
  std::vector<std::string> json = args;
  json.push_back("--json");
  const RunResult j = run_remat(json);
  ASSERT_EQ(j.exit_code, 0) << j.describe();
  for (const char* key : {"\"bf16_paths\"", "\"matmul\"", "\"conversions\"", "\"attention\"", "\"precision\": \"bf16\""})
    EXPECT_NE(j.out.find(key), std::string::npos) << key << "\n" << j.out;
  // The portable path, forced, is said so (a CPU without AVX512_BF16 runs it).
  setenv("REMAT_BF16_ISA", "portable", 1);
  const RunResult p = run_remat(args);
  unsetenv("REMAT_BF16_ISA");
  ASSERT_EQ(p.exit_code, 0) << p.describe();
  EXPECT_NE(p.out.find("conversions portable, attention portable"), std::string::npos) << p.out;
}

}  // namespace
