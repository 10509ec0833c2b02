// Flags that say what they do (issue #11) and budgets that mean what they say (issue #9): --version,
// unknown flags with suggestions, stray arguments, bounded --threads, --steps/--seed/--block-size
// refusals, one strict byte-size parser for --memory-limit and --budget, tensor names checked against
// the model, one default model whose `remat plan` command pastes into `remat train`, --val-data and
// --val-fraction, progress lines in a log, and bench rows printed as they are measured.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "run.h"

namespace {

using namespace remat_cli_test;
using nlohmann::json;

#define EXPECT_USER_ERROR(r, ...)              \
  do {                                         \
    SCOPED_TRACE("expected a user error");     \
    check_user_error((r), 1, {__VA_ARGS__});   \
  } while (0)
#define EXPECT_PARSE_ERROR(r, ...)             \
  do {                                         \
    SCOPED_TRACE("expected a parse error");    \
    check_user_error((r), 2, {__VA_ARGS__});   \
  } while (0)

bool has(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

RunResult train(std::vector<std::string> extra) { return run_remat(tiny_train(std::move(extra))); }

RunResult ok(const std::vector<std::string>& args) {
  RunResult r = run_remat(args);
  EXPECT_TRUE(r.exited() && r.exit_code == 0) << r.describe();
  return r;
}

// Splits a printed command line on spaces (the commands tested here quote nothing).
std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> w;
  std::istringstream in(line);
  for (std::string x; in >> x;) w.push_back(x);
  return w;
}

// ---- --version ----

TEST(CliFlags, VersionPrintsVersionCompilerAndOneDnn) {
  const RunResult r = ok({"--version"});
  EXPECT_TRUE(std::regex_search(r.out, std::regex("^remat [0-9]+\\.[0-9]+\\.[0-9]+\\n"))) << r.out;
  EXPECT_TRUE(has(r.out, "compiler: ")) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("oneDNN: [0-9]+\\.[0-9]+\\.[0-9]+"))) << r.out;
  EXPECT_TRUE(r.err.empty()) << r.err;
}

// ---- unknown flags and stray arguments ----

TEST(CliFlags, UnknownFlagSuggestsTheClosestOne) {
  const RunResult r = run_remat({"train", "--stesp", "2"});
  const std::string line = check_user_error(r, 2, {});
  EXPECT_EQ(line, "remat: [cli] unknown flag --stesp for 'remat train' (hint: did you mean --steps?)");
  EXPECT_PARSE_ERROR(run_remat({"train", "--memorylimit", "3G"}), "unknown flag --memorylimit",
                     "did you mean --memory-limit?");
  EXPECT_PARSE_ERROR(run_remat({"bench", "--recompute-lst"}), "for 'remat bench'", "did you mean --recompute-last?");
  EXPECT_PARSE_ERROR(run_remat({"train", "--stesp=2"}), "unknown flag --stesp ", "did you mean --steps?");
  // Nothing close: the command's help.
  EXPECT_PARSE_ERROR(run_remat({"train", "--frobnicate"}), "unknown flag --frobnicate for 'remat train'",
                     "run 'remat train --help'");
  // Another command's flag: say whose.
  EXPECT_PARSE_ERROR(run_remat({"plan", "--steps", "3"}), "unknown flag --steps for 'remat plan'",
                     "--steps is a flag of 'remat train'");
}

TEST(CliFlags, StrayArgumentsAndMissingValuesAreNamed) {
  EXPECT_PARSE_ERROR(train({"--steps", "1", "extra"}), "unexpected argument 'extra' for 'remat train'",
                     "--steps takes one value (1)");
  EXPECT_PARSE_ERROR(train({"--steps=1", "2"}), "unexpected argument '2'", "--steps takes one value");
  EXPECT_PARSE_ERROR(run_remat({"train", "--no-progress", "true"}), "unexpected argument 'true'",
                     "--no-progress is a switch and takes no value");
  EXPECT_PARSE_ERROR(run_remat({"plan", "oops"}), "unexpected argument 'oops' for 'remat plan'",
                     "remat plan takes only --flags");
  EXPECT_PARSE_ERROR(run_remat({"train", "--steps"}), "--steps needs a value", "remat train --help");
}

// ---- --threads ----

TEST(CliFlags, ThreadsAreBounded) {
  for (const char* sub : {"train", "bench", "trace", "plan"}) {
    SCOPED_TRACE(sub);
    EXPECT_USER_ERROR(run_remat({sub, "--threads", "100000"}), "[cli]", "--threads 100000 is above",
                      "hardware threads");
    EXPECT_USER_ERROR(run_remat({sub, "--threads", "0"}), "--threads must be at least 1, got 0");
    EXPECT_USER_ERROR(run_remat({sub, "--threads", "-3"}), "--threads must be at least 1, got -3");
  }
  EXPECT_USER_ERROR(run_remat({"grads", "--init-from", "m", "--data", "d", "--out", "g.safetensors", "--threads",
                               "100000"}),
                    "--threads 100000 is above");
  const RunResult r = ok(tiny_train({"--steps", "1", "--threads", "2"}));
  EXPECT_TRUE(has(r.out, "1 steps")) << r.out;
}

// ---- --steps, --warmup ----

TEST(CliFlags, StepsMustBeAtLeastOne) {
  EXPECT_USER_ERROR(train({"--steps", "0"}), "[train]", "--steps must be at least 1, got 0");
  EXPECT_USER_ERROR(run_remat({"bench", "--preset", "tiny", "--timed-steps", "0"}), "[bench]",
                    "--timed-steps must be at least 1, got 0");
  EXPECT_USER_ERROR(run_remat({"bench", "--preset", "tiny", "--untimed-steps", "-1"}), "[bench]", "--untimed-steps must be >= 0");
}

TEST(CliFlags, StepsZeroOnlyEvaluatesInitFromWeights) {
  TempDir d;
  ASSERT_EQ(train({"--steps", "1", "--save", d / "w.safetensors"}).exit_code, 0);
  const RunResult r = ok(tiny_train({"--init-from", d / "w.safetensors", "--steps", "0"}));
  EXPECT_TRUE(has(r.out, "val loss")) << r.out;
  EXPECT_TRUE(has(r.out, "no memory report")) << r.out;
  EXPECT_FALSE(has(r.out, "MISMATCH")) << r.out;
  EXPECT_FALSE(has(r.out, "nan")) << r.out;
  EXPECT_USER_ERROR(train({"--init-from", d / "w.safetensors", "--steps", "0", "--report-json", d / "r.json"}),
                    "--report-json needs at least one step");
}

TEST(CliFlags, ResumingACompleteRunIsRefused) {
  TempDir d;
  ASSERT_EQ(train({"--steps", "2", "--save-dir", d / "ck"}).exit_code, 0);
  EXPECT_USER_ERROR(train({"--resume", d / "ck"}), "at step 2 of 2: the run is complete", "raise --steps");
  EXPECT_USER_ERROR(train({"--resume", d / "ck", "--steps", "2"}), "--steps 2 is the checkpoint's step 2",
                    "--steps 3 or more");
}

// ---- --seed ----

TEST(CliFlags, SeedIsANonNegativeInt64) {
  for (const char* sub : {"train", "bench"}) {
    SCOPED_TRACE(sub);
    EXPECT_USER_ERROR(run_remat({sub, "--seed", "-1"}), "[cli]", "--seed -1 is negative");
    EXPECT_USER_ERROR(run_remat({sub, "--seed", "9223372036854775808"}), "above 2^63-1");
    EXPECT_USER_ERROR(run_remat({sub, "--seed", "18446744073709551615"}), "above 2^63-1");
    EXPECT_USER_ERROR(run_remat({sub, "--seed", "12x"}), "--seed '12x' is not a whole number");
    EXPECT_USER_ERROR(run_remat({sub, "--seed", ""}), "--seed is empty");
  }
  ok(tiny_train({"--steps", "1", "--seed", "9223372036854775807"}));
}

// ---- model flags blame the flag given ----

TEST(CliFlags, ModelFlagErrorsNameTheirFlag) {
  for (const char* sub : {"train", "bench", "trace", "plan"}) {
    SCOPED_TRACE(sub);
    const std::string line = check_user_error(run_remat({sub, "--block-size", "0"}), 1,
                                              {"[config]", "--block-size must be positive, got 0"});
    EXPECT_FALSE(has(line, "--seq must")) << line;
  }
  EXPECT_USER_ERROR(train({"--block-size", "-3"}), "--block-size must be positive, got -3");
  EXPECT_USER_ERROR(train({"--seq", "0", "--block-size", "64"}), "--seq must be positive, got 0");
  EXPECT_USER_ERROR(run_remat({"train", "--preset", "llama-tiny", "--kv-heads", "0"}), "--kv-heads must be positive");
  EXPECT_USER_ERROR(train({"--hidden", "0"}), "--hidden must be positive, got 0");
  EXPECT_USER_ERROR(train({"--rope-theta", "500000"}), "--rope-theta is for LLaMA", "gpt2 has learned positions");
  EXPECT_USER_ERROR(run_remat({"plan", "--preset", "llama-tiny", "--rope-theta", "-1"}),
                    "--rope-theta must be a positive number");
  // Given, they are used: --rope-theta on LLaMA, --block-size with a shorter --seq.
  ok({"plan", "--preset", "llama-tiny", "--rope-theta", "500000"});
  const RunResult r = ok(tiny_train({"--steps", "1", "--block-size", "128", "--seq", "32"}));
  EXPECT_TRUE(has(r.out, "T=128")) << r.out;
  EXPECT_TRUE(has(r.out, "seq 32")) << r.out;
}

// ---- byte sizes: --memory-limit and --budget ----

TEST(CliFlags, ByteSizesAcceptUnitsWithAndWithoutSpaces) {
  for (const char* v : {"3GB", "3 GiB", "3g", "1.5G", "3000000000"}) {
    SCOPED_TRACE(v);
    ok(tiny_train({"--steps", "1", "--memory-limit", v}));
    const RunResult p = ok({"plan", "--preset", "tiny", "--step-budget", v});
    EXPECT_TRUE(has(p.out, "use: remat train")) << p.out;
    const RunResult t = ok(tiny_train({"--steps", "1", "--eval-batches", "1", "--step-budget", v}));
    EXPECT_TRUE(has(t.out, "plan for --step-budget ")) << t.out;
  }
}

TEST(CliFlags, ByteUnitsAreBinaryForKMGAndIBAndDecimalForB) {
  // The values, read back from the refusals that print them: 1MiB = 1m = 1 MiB = 2^20; 1MB = 10^6 =
  // 976.6 KiB.
  for (const char* v : {"1MiB", "1m", "1 MiB", "1M", "1048576"}) {
    SCOPED_TRACE(v);
    EXPECT_USER_ERROR(train({"--steps", "1", "--memory-limit", v}), "[memory]", "limit of 1.00 MiB");
    EXPECT_USER_ERROR(run_remat({"plan", "--preset", "tiny", "--step-budget", v}), "[budget]", "--step-budget 1.00 MiB");
    EXPECT_USER_ERROR(train({"--steps", "1", "--step-budget", v}), "[budget]", "--step-budget 1.00 MiB");
  }
  EXPECT_USER_ERROR(train({"--steps", "1", "--memory-limit", "1MB"}), "limit of 976.6 KiB");
  EXPECT_USER_ERROR(run_remat({"plan", "--preset", "tiny", "--step-budget", "1MB"}), "--step-budget 976.6 KiB");
  EXPECT_USER_ERROR(run_remat({"plan", "--preset", "tiny", "--step-budget", "1kB"}), "--step-budget 1000 B");
  EXPECT_USER_ERROR(run_remat({"plan", "--preset", "tiny", "--step-budget", "1.5k"}), "--step-budget 1.5 KiB");
}

TEST(CliFlags, ByteSizesRefuseFractionsHugeNegativeEmptyAndGarbage) {
  for (const std::string flag : {"--memory-limit", "--budget", "--step-budget", "plan --budget"}) {
    SCOPED_TRACE(flag);
    auto run = [&](const std::string& v) {
      return flag == "plan --budget" ? run_remat({"plan", "--budget", v}) : train({"--steps", "1", flag, v});
    };
    const std::string name = flag == "plan --budget" ? "--budget" : flag;
    EXPECT_USER_ERROR(run("0.5"), "[cli]", name + " '0.5' is a fraction of a byte", "did you mean " + name + " 0.5GiB?");
    EXPECT_USER_ERROR(run("1e30"), name + " '1e30' is larger than any machine", "e.g. " + name + " 512MiB");
    EXPECT_USER_ERROR(run("8EiB"), "unknown unit 'EiB'");
    EXPECT_USER_ERROR(run("5000000TiB"), "larger than any machine");
    EXPECT_USER_ERROR(run("-1"), name + " '-1' is negative", "e.g. " + name);
    EXPECT_USER_ERROR(run("0"), name + " '0' is zero");
    EXPECT_USER_ERROR(run(""), name + " is empty", "e.g. " + name + " 512MiB");
    EXPECT_USER_ERROR(run("lots"), name + " 'lots' is not a byte size");
    EXPECT_USER_ERROR(run("3 XB"), "unknown unit 'XB'");
    EXPECT_USER_ERROR(run("0x10"), "unknown unit");
  }
  EXPECT_USER_ERROR(train({"--steps", "1", "--memory-limit", "0"}), "omit --memory-limit for no limit");
}

TEST(CliFlags, HelpSaysWhatGBMeans) {
  for (const char* sub : {"train", "plan"}) {
    const RunResult r = ok({sub, "--help"});
    EXPECT_TRUE(has(r.out, "powers of 1024 (3G = 3GiB)")) << r.out;
    EXPECT_TRUE(has(r.out, "powers of 1000 (3GB = 3e9 bytes)")) << r.out;
  }
}

// ---- tensor names and policies come from the model ----

TEST(CliFlags, UnknownTensorNamesAreRefusedListingTheBlock) {
  for (const char* flag : {"--save-only", "--save-all-but"}) {
    SCOPED_TRACE(flag);
    EXPECT_USER_ERROR(train({"--steps", "1", flag, "attn.probz"}), "[policy]",
                      std::string(flag) + " 'attn.probz' names no tensor", "attn.probs", "mlp.gelu", "res_2");
  }
  EXPECT_USER_ERROR(train({"--steps", "1", "--save-all-but", "attn.probs,mlp.gleu"}), "'mlp.gleu'");
  EXPECT_USER_ERROR(run_remat({"train", "--preset", "llama-tiny", "--steps", "1", "--save-all-but", "attn.probs"}),
                    "'attn.probs' names no tensor", "self_attn.probs", "mlp.act");
  // Flash attention saves no probabilities: the list is flash's.
  EXPECT_USER_ERROR(train({"--steps", "1", "--attention", "flash", "--save-all-but", "attn.probs"}),
                    "(with flash attention)", "attn.lse");
  // Valid names, full names and globs still work.
  for (const char* names : {"attn.probs", "h.1.attn.probs", "h.*.attn.probs"}) {
    const RunResult r = ok(tiny_train({"--steps", "1", "--save-all-but", names}));
    EXPECT_TRUE(has(r.out, std::string("policy save-all-but:") + names)) << r.out;
  }
}

TEST(CliFlags, PoliciesMustBePresetsOfTheModel) {
  EXPECT_USER_ERROR(train({"--steps", "1", "--policy", "swiglu"}), "[policy]", "unknown policy 'swiglu' for gpt2",
                    "selective");
  EXPECT_USER_ERROR(run_remat({"plan", "--recompute", "none", "--policy", "swiglu"}), "unknown policy 'swiglu' for gpt2");
  EXPECT_USER_ERROR(run_remat({"bench", "--recompute", "none+swiglu"}), "[bench]",
                    "'swiglu' in row 'none+swiglu' is neither a strategy", "nor a policy of gpt2");
  EXPECT_USER_ERROR(run_remat({"bench", "--recompute", "block+selective+gelu"}), "names two policies");
  EXPECT_USER_ERROR(run_remat({"bench", "--recompute", "block+sqrt"}), "names two strategies");
}

// ---- one default model; --batch and --micro-batch mean the same everywhere ----

TEST(CliFlags, OneDefaultModelForTrainBenchPlanAndTrace) {
  const std::string model = "gpt2 L=4 C=128 NH=4 T=128 V=256";
  EXPECT_TRUE(has(ok({"train", "--steps", "1", "--eval-every", "0", "--eval-batches", "1", "--sample-tokens", "0",
                      "--no-progress"})
                      .out,
                  "remat train: " + model));
  EXPECT_TRUE(has(ok({"bench", "--recompute", "none", "--timed-steps", "1", "--untimed-steps", "0"}).out, "remat bench: " + model));
  EXPECT_TRUE(has(ok({"plan"}).out, "remat plan: " + model + ", B=8 (micro-batch 8)"));
  EXPECT_TRUE(has(ok({"trace"}).out, "trace of one step: " + model));
}

// --init-from gives plan, bench, trace and calibrate the model's shape, as it gives train its weights
// and shape: a folder train --save wrote (config.json + weights), with model flags over it.
TEST(CliFlags, InitFromGivesTheShapeToEveryCommand) {
  TempDir d;
  const std::string folder = d / "m";
  ok({"train", "--preset", "tiny", "--layers", "3", "--channels", "96", "--heads", "3", "--steps", "1", "--eval-every",
      "0", "--sample-tokens", "0", "--no-progress", "--quiet", "--save", folder + "/"});
  const std::string model = "gpt2 L=3 C=96 NH=3";
  EXPECT_TRUE(has(ok({"plan", "--init-from", folder}).out, "remat plan: " + model));
  EXPECT_TRUE(has(ok({"trace", "--init-from", folder}).out, "trace of one step: " + model));
  EXPECT_TRUE(has(ok({"bench", "--init-from", folder, "--recompute", "none", "--timed-steps", "1", "--untimed-steps", "0"}).out,
                  "remat bench: " + model));
  EXPECT_TRUE(has(ok({"plan", "--init-from", folder, "--layers", "2"}).out, "remat plan: gpt2 L=2 C=96 NH=3"));
  // plan's use: line keeps the file, so the pasted command trains that model.
  EXPECT_TRUE(has(ok({"plan", "--init-from", folder, "--step-budget", "64MiB"}).out, "--init-from " + folder));
  EXPECT_USER_ERROR(run_remat({"plan", "--init-from", d / "nope"}), "nope");
}

TEST(CliFlags, PlanBatchIsPerStepAndMicroBatchPerForward) {
  const json a = json::parse(ok({"plan", "--preset", "tiny", "--batch", "8", "--micro-batch", "2", "--recompute",
                                 "none", "--json"}).out);
  const json b = json::parse(ok({"plan", "--preset", "tiny", "--batch", "2", "--recompute", "none", "--json"}).out);
  EXPECT_EQ(a.at(0).at("predicted_activation_bytes"), b.at(0).at("predicted_activation_bytes"));
  EXPECT_USER_ERROR(run_remat({"plan", "--batch", "8", "--micro-batch", "3"}), "--micro-batch 3 does not divide --batch 8");
  const RunResult t = ok({"trace", "--preset", "tiny", "--batch", "8", "--micro-batch", "4"});
  EXPECT_TRUE(has(t.out, "batch 8 = 2 micro-batches of 4, seq 64; micro-step 1 of 2")) << t.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(t.out, m, std::regex("peak activation (\\S+ \\S+) measured, (\\S+ \\S+) predicted")));
  EXPECT_EQ(m[1], m[2]);
}

// `remat plan --budget` prints a complete `remat train` command; pasted (plus --steps 1), it trains the
// planned model under the planned strategy and policies, within the (whole-step) budget. The budget
// of each case is the whole step of its `block` row, read from plan's own JSON.
TEST(CliFlags, PlanUseLinePastesIntoTrain) {
  struct Case {
    std::vector<std::string> model;
    std::string batch_seen;
  };
  const std::vector<Case> cases{
      {{"--preset", "tiny"}, "batch 8 = 1 micro-batch(es) of 8"},
      {{"--preset", "llama-tiny", "--layers", "3", "--dropout", "0.1", "--attention", "flash", "--batch", "8",
        "--micro-batch", "4", "--seq", "32"},
       "batch 8 = 2 micro-batch(es) of 4, seq 32"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> plan{"plan"};
    plan.insert(plan.end(), c.model.begin(), c.model.end());
    std::vector<std::string> as_json = plan;
    as_json.push_back("--json");
    const json rows = json::parse(ok(as_json).out).at("textbook");
    size_t budget = 0;
    for (const json& r : rows)
      if (r.at("label") == "block") budget = r.at("predicted_step_bytes").get<size_t>();
    ASSERT_GT(budget, 0u);
    plan.insert(plan.end(), {"--step-budget", std::to_string(budget)});
    const RunResult p = ok(plan);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(p.out, m, std::regex("\nuse: remat (train [^\n]*)\n$"))) << p.out;
    const std::string line = m[1];
    for (const char* flag : {"--preset ", "--batch ", "--micro-batch ", "--seq "})
      EXPECT_TRUE(has(line, flag)) << flag << " missing from: " << line;
    EXPECT_TRUE(has(line, "--recompute ") || has(line, "--step-budget ")) << line;
    std::vector<std::string> args = words(line);
    for (const char* a : {"--steps", "1", "--eval-every", "0", "--eval-batches", "1", "--sample-tokens", "0",
                          "--no-progress"})
      args.push_back(a);
    const RunResult t = ok(args);
    EXPECT_TRUE(has(t.out, c.batch_seen)) << t.out;
    EXPECT_TRUE(has(t.out, "(equal to the byte)")) << t.out;
    ASSERT_TRUE(std::regex_search(t.out, m, std::regex("\n  total +([0-9.]+) MiB +predicted +([0-9.]+) MiB"))) << t.out;
    EXPECT_EQ(m[1], m[2]);
    EXPECT_LE(std::stod(m[1]), double(budget) / 1048576.0 + 0.005) << t.out;
  }
}

// ---- validation data ----

// A raw uint16 token file of tokens first .. first + n - 1 of a fixed sequence (values below `mod`).
std::string u16_file(const TempDir& d, const std::string& name, size_t n, uint16_t mod, size_t first = 0) {
  std::string bytes;
  for (size_t i = first; i < first + n; ++i) {
    const uint16_t t = uint16_t((i * 7 + i / 3) % mod);
    bytes.push_back(char(t & 0xff));
    bytes.push_back(char(t >> 8));
  }
  return d.write(name, bytes);
}

std::string first_val_loss(const std::string& out) {
  std::smatch m;
  return std::regex_search(out, m, std::regex("val loss ([0-9.]+) ->")) ? m[1].str() : "none";
}

TEST(CliFlags, ValDataValidatesOnItsOwnFile) {
  TempDir d;
  const std::string tr = u16_file(d, "train.bin", 20000, 256), va = u16_file(d, "val.bin", 3000, 256);
  const RunResult r = ok(tiny_train({"--steps", "1", "--data", tr, "--val-data", va}));
  EXPECT_TRUE(has(r.out, "data: raw uint16 token file '" + tr + "' (20,000 tokens), all of it trains; validation: "
                             "--val-data raw uint16 token file '" + va + "' (3,000 tokens)"))
      << r.out;
  // --data-format applies to both files.
  const RunResult t = ok(tiny_train({"--steps", "1", "--data", tr, "--val-data", va, "--data-format", "text"}));
  EXPECT_TRUE(has(t.out, "validation: --val-data text file '" + va + "'")) << t.out;
  // The validation loss is the file's: a copy of the split's tail validates exactly as the split does.
  const std::string tail = u16_file(d, "tail.bin", 2000, 256, 18000);
  const RunResult split = ok(tiny_train({"--steps", "1", "--data", tr}));
  EXPECT_TRUE(has(split.out, "its last 10% (2,000 tokens")) << split.out;
  EXPECT_EQ(first_val_loss(ok(tiny_train({"--steps", "1", "--data", tr, "--val-data", tail})).out),
            first_val_loss(split.out));
  EXPECT_NE(first_val_loss(r.out), first_val_loss(split.out));

  EXPECT_USER_ERROR(train({"--steps", "1", "--data", tr, "--val-data", d / "nope.bin"}), "[data]",
                    "--val-data '" + d / "nope.bin" + "' does not exist");
  EXPECT_USER_ERROR(train({"--steps", "1", "--data", tr, "--val-data", tr}), "is the training data file");
  EXPECT_USER_ERROR(train({"--steps", "1", "--val-data", va}), "is token ids but the training data",
                    "byte-level text");
  EXPECT_USER_ERROR(train({"--steps", "1", "--data", tr, "--val-data", u16_file(d, "short.bin", 10, 256)}),
                    "--val-data", "holds 10 tokens");
  EXPECT_USER_ERROR(train({"--steps", "1", "--data", tr, "--val-data", va, "--val-fraction", "0.2"}),
                    "--val-data and --val-fraction cannot be combined");
  EXPECT_USER_ERROR(train({"--steps", "1", "--val-data", ""}), "--val-data is empty");
}

TEST(CliFlags, ValFractionSplitsTheData) {
  const RunResult r = ok(tiny_train({"--steps", "1"}));
  EXPECT_TRUE(has(r.out, "train split (179,995 tokens); validation: its last 10% (19,999 tokens, --val-fraction 0.1)"))
      << r.out;
  const RunResult q = ok(tiny_train({"--steps", "1", "--val-fraction", "0.25"}));
  EXPECT_TRUE(has(q.out, "train split (149,995 tokens); validation: its last 25% (49,999 tokens")) << q.out;
  for (const char* f : {"0", "1", "1.5", "-0.1"})
    EXPECT_USER_ERROR(train({"--steps", "1", "--val-fraction", f}), "--val-fraction must be between 0 and 1");
  check_user_error(train({"--steps", "1", "--val-fraction", "nan"}), 2, {"--val-fraction 'nan' is not a decimal number"});
  TempDir d;
  const std::string tr = u16_file(d, "t.bin", 2000, 256);
  EXPECT_USER_ERROR(train({"--steps", "1", "--data", tr, "--val-fraction", "0.01"}), "leaves 20 validation tokens",
                    "a larger --val-fraction, --val-data FILE");
}

// ---- progress ----

TEST(CliFlags, ProgressLinesInALogShowElapsedAndEta) {
  // stderr is a pipe here: a line at least every --progress-every seconds (0: every step).
  const RunResult r = ok({"train", "--preset", "tiny", "--steps", "3", "--eval-every", "0", "--sample-tokens", "0",
                          "--progress-every", "0"});
  const auto lines = split_lines(r.err);
  ASSERT_EQ(lines.size(), 3u) << r.err;
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i].rfind("step " + std::to_string(i + 1) + "/3  loss ", 0), 0u) << lines[i];
    EXPECT_TRUE(std::regex_search(lines[i], std::regex("  elapsed [0-9]+:[0-9]{2}  ETA [0-9]+:[0-9]{2}$"))) << lines[i];
  }
  // With the default 10 s, a short run prints no progress line (eval lines only, and there are none here).
  const RunResult q = ok({"train", "--preset", "tiny", "--steps", "3", "--eval-every", "0", "--sample-tokens", "0"});
  EXPECT_TRUE(q.err.empty()) << q.err;
  const RunResult e = ok({"train", "--preset", "tiny", "--steps", "2", "--eval-every", "2", "--sample-tokens", "0"});
  ASSERT_EQ(split_lines(e.err).size(), 1u) << e.err;
  EXPECT_TRUE(has(e.err, "val ") && has(e.err, "ETA 0:00")) << e.err;
  EXPECT_USER_ERROR(train({"--progress-every", "-1"}), "--progress-every must be >= 0");
}

// ---- bench prints each row when it is measured ----

TEST(CliFlags, BenchPrintsEachRowWhenMeasured) {
  for (bool as_json : {false, true}) {
    SCOPED_TRACE(as_json ? "json" : "table");
    std::vector<std::string> args{"bench", "--recompute", "none", "block", "block", "block", "block", "block",
                                  "--timed-steps", "2", "--untimed-steps", "0"};
    if (as_json) args.push_back("--json");
    Child c(args);
    ASSERT_TRUE(c.wait_for_output(as_json ? "\"strategy\": \"none\"" : "\nnone ", false, 120)) << c.so_far().describe();
    if (as_json) {
      ASSERT_TRUE(c.wait_for_output("\n  }", false, 60)) << c.so_far().describe();
    }
    EXPECT_FALSE(c.exited()) << "the first row appeared only at the end";
    EXPECT_FALSE(has(c.so_far().out, as_json ? "\"strategy\": \"block\"" : "\nblock ")) << c.so_far().out;
    const RunResult r = c.finish(300);
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    if (as_json) {
      const json rows = json::parse(r.out);
      ASSERT_EQ(rows.size(), 6u);
      EXPECT_EQ(rows[0].at("strategy"), "none");
    }
  }
}

// ---- help text ----

TEST(CliFlags, HelpDoesNotCiteTheSpec) {
  const RunResult r = ok({"--help-all"});
  EXPECT_FALSE(std::regex_search(r.out, std::regex("\\bspec\\b|\\bspec's\\b"))) << r.out;
  EXPECT_TRUE(has(r.out, "--val-data")) << r.out;
  EXPECT_TRUE(has(r.out, "--progress-every")) << r.out;
  EXPECT_TRUE(has(r.out, "--version")) << r.out;
}

}  // namespace
