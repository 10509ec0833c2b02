// Data parallelism under mpirun (Open MPI): 2 ranks on this machine. Each run's weights are compared
// byte for byte with one process that runs both ranks' micro-batches and sums their gradients in
// rank order (--ranks 2 without mpirun), and ZeRO-1's and ZeRO-3's with ZeRO-0's. Skips, naming the
// package, when mpirun is missing.
#include <unistd.h>

#include <algorithm>
#include <regex>

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "run.h"

using namespace remat_cli_test;

namespace {

const char* kMpirun = "/usr/bin/mpirun";

// mpirun as root (containers, CI) with more ranks than cores allowed. Under the sanitizers (remat and
// these tests built alike), LeakSanitizer is told which of the leaks at exit are Open MPI's own.
std::vector<std::string> mpirun_base() {
  return {kMpirun, "--allow-run-as-root", "--oversubscribe", "-x",
          std::string("LSAN_OPTIONS=suppressions=") + REMAT_SOURCE_DIR + "/scripts/lsan-openmpi.supp:fast_unwind_on_malloc=0"};
}
std::vector<std::string> mpirun(int np) {
  std::vector<std::string> a = mpirun_base();
  a.insert(a.end(), {"-np", std::to_string(np)});
  return a;
}

RunResult run_mpi(const std::vector<std::string>& args, int np = 2, double timeout = 180) {
  SpawnOptions o;
  o.launcher = mpirun(np);
  return Child(args, o).finish(timeout);
}

class Mpi : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access(kMpirun, X_OK) != 0) REMAT_SKIP_WITHOUT("needs mpirun: apt-get install openmpi-bin");
  }
  TempDir dir;
};

// A small run with dropout, 2 micro-batches per rank, and the given strategy flags.
std::vector<std::string> run_args(const std::vector<std::string>& extra, const std::string& save,
                                  const std::string& preset = "tiny") {
  std::vector<std::string> a{"train", "--preset", preset, "--eval-every", "0", "--sample-tokens", "0", "--no-progress",
                             "--steps", "3", "--micro-batch", "2", "--dropout", "0.1", "--quiet", "--save", save};
  if (std::find(extra.begin(), extra.end(), "--plan") == extra.end()) a.insert(a.end(), {"--batch", "8"});
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// mpirun -np 2 remat train: `steps` steps planned for `budget` a rank, quietly but with the report.
RunResult train_budget(const std::string& budget, const std::string& steps, const std::vector<std::string>& flags) {
  std::vector<std::string> a{"train", "--eval-every", "0", "--sample-tokens", "0", "--no-progress", "--steps", steps,
                             "--step-budget", budget};
  a.insert(a.end(), flags.begin(), flags.end());
  return run_mpi(a);
}

void expect_same_weights(const std::string& a, const std::string& b) {
  const std::string x = slurp(a), y = slurp(b);
  ASSERT_FALSE(x.empty());
  EXPECT_TRUE(x == y) << a << " and " << b << " differ";
}

void check_exact(const TempDir& dir, const std::vector<std::string>& strategy, const std::string& preset = "tiny",
                 const std::string& gather = "hold", bool overlap = true) {
  const RunResult one = run_remat(run_args(strategy, dir / "one.safetensors", preset), "", 180);
  ASSERT_EQ(one.exit_code, 0) << one.describe();
  std::vector<std::string> emulated = strategy;
  emulated.insert(emulated.end(), {"--ranks", "2"});
  const RunResult emu = run_remat(run_args(emulated, dir / "emu.safetensors", preset), "", 180);
  ASSERT_EQ(emu.exit_code, 0) << emu.describe();
  const RunResult mpi = run_mpi(run_args(strategy, dir / "mpi.safetensors", preset));
  ASSERT_EQ(mpi.exit_code, 0) << mpi.describe();
  std::vector<std::string> zero1 = strategy;
  zero1.insert(zero1.end(), {"--zero", "1"});
  const RunResult z1 = run_mpi(run_args(zero1, dir / "z1.safetensors", preset));
  ASSERT_EQ(z1.exit_code, 0) << z1.describe();
  std::vector<std::string> zero3 = strategy;
  zero3.insert(zero3.end(), {"--zero", "3", "--gather", gather});
  if (!overlap) zero3.push_back("--no-overlap");  // no block gathered ahead, every reduction after the backward
  std::vector<std::string> z3_args = run_args(zero3, dir / "z3.safetensors", preset);
  std::erase(z3_args, "--quiet");  // the report says how often it gathered
  const RunResult z3 = run_mpi(z3_args);
  ASSERT_EQ(z3.exit_code, 0) << z3.describe();
  expect_same_weights(dir / "emu.safetensors", dir / "mpi.safetensors");
  expect_same_weights(dir / "mpi.safetensors", dir / "z1.safetensors");
  expect_same_weights(dir / "mpi.safetensors", dir / "z3.safetensors");
  // ZeRO-3 gathered each block's parameters as often as the schedule says.
  std::smatch g;
  ASSERT_TRUE(std::regex_search(z3.out, g, std::regex("ZeRO-3 on rank 0: ([0-9]+) all-gathers of blocks' parameters in "
                                                      "the last step \\(the schedule's count: ([0-9]+); --gather " +
                                                      gather + "\\)")))
      << z3.out;
  EXPECT_EQ(g[1], g[2]);
  EXPECT_NE(z3.out.find("as predicted to the byte"), std::string::npos) << z3.out;
  EXPECT_NE(z3.out.find("whole step of each rank, measured: rank 0 "), std::string::npos) << z3.out;
  EXPECT_NE(z3.out.find("; each as its rank predicted, to the byte"), std::string::npos) << z3.out;
  // The same batches: the losses agree with one process to rounding, not to the bit (the sums differ
  // in order), and the weights are not a copy of it.
  EXPECT_NE(slurp(dir / "one.safetensors"), slurp(dir / "mpi.safetensors"));
  // Rank 0 alone prints: one run header, and its whole step as predicted.
  EXPECT_EQ(mpi.out.find("remat train:"), mpi.out.rfind("remat train:")) << mpi.out;
  EXPECT_NE(mpi.out.find("as predicted to the byte"), std::string::npos) << mpi.out;
  EXPECT_NE(z1.out.find("as predicted to the byte"), std::string::npos) << z1.out;
}

}  // namespace

TEST_F(Mpi, Gpt2NoneIsBitIdenticalToOneProcessSummingRanks) { check_exact(dir, {"--recompute", "none"}); }
TEST_F(Mpi, Gpt2BlockIsBitIdentical) { check_exact(dir, {"--recompute", "block", "--policy", "selective"}); }
TEST_F(Mpi, Gpt2SqrtIsBitIdentical) { check_exact(dir, {"--layers", "4", "--recompute", "sqrt"}, "tiny", "regather"); }
TEST_F(Mpi, LlamaBf16BlockIsBitIdentical) {
  check_exact(dir, {"--precision", "bf16", "--recompute", "block"}, "llama-tiny", "hold", false);
}
TEST_F(Mpi, BudgetPlanIsBitIdentical) {
  const RunResult p = run_remat({"plan", "--preset", "tiny", "--dropout", "0.1", "--batch", "4", "--micro-batch", "2", "--step-budget", "3.6MiB",
                                 "--threads", "1", "--out", dir / "plan.json"});
  ASSERT_EQ(p.exit_code, 0) << p.describe();
  // A plan is one rank's: each of the 2 ranks runs its 4 sequences of the batch of 8 under it.
  const std::vector<std::string> with_plan{"--plan", dir / "plan.json"};
  const RunResult mpi = run_mpi(run_args(with_plan, dir / "mpi.safetensors"));
  ASSERT_EQ(mpi.exit_code, 0) << mpi.describe();
  std::vector<std::string> emulated = with_plan;
  emulated.insert(emulated.end(), {"--ranks", "2"});
  const RunResult emu = run_remat(run_args(emulated, dir / "emu.safetensors"), "", 180);
  ASSERT_EQ(emu.exit_code, 0) << emu.describe();
  expect_same_weights(dir / "emu.safetensors", dir / "mpi.safetensors");
}

TEST_F(Mpi, ABatchThatDoesNotDivideStopsEveryRank) {
  const RunResult r = run_mpi(tiny_train({"--steps", "2", "--batch", "6", "--micro-batch", "2"}));
  EXPECT_NE(r.exit_code, 0) << r.describe();
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.err.find("--batch 6 does not divide over 2 ranks of --micro-batch 2"), std::string::npos) << r.err;
}

TEST_F(Mpi, RanksWithAnotherRunAreRefusedByField) {
  SpawnOptions o;
  o.launcher = mpirun(1);
  o.launcher.insert(o.launcher.end(), {REMAT_BINARY, "train", "--preset", "tiny", "--steps", "2", "--batch", "4", "--seed",
                                       "1", "--eval-every", "0", "--sample-tokens", "0", "--no-progress", ":", "-np", "1"});
  const RunResult r = Child(tiny_train({"--steps", "2", "--batch", "4", "--seed", "2"}), o).finish(120);
  EXPECT_NE(r.exit_code, 0) << r.describe();
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.err.find("rank 1 was started with another run than rank 0"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("seed"), std::string::npos) << r.err;
}

TEST_F(Mpi, ARankThatFailsAtStartStopsEveryRank) {
  SpawnOptions o;
  o.launcher = mpirun(1);
  o.launcher.insert(o.launcher.end(), {REMAT_BINARY, "train", "--preset", "tiny", "--steps", "50", "--batch", "4",
                                       "--eval-every", "0", "--sample-tokens", "0", ":", "-np", "1"});
  const RunResult r = Child(tiny_train({"--steps", "50", "--batch", "4", "--data", dir / "missing.txt"}), o).finish(120);
  EXPECT_NE(r.exit_code, 0) << r.describe();
  EXPECT_FALSE(r.timed_out) << "a rank that fails must not leave the other waiting";
  EXPECT_NE(r.err.find("missing.txt"), std::string::npos) << r.err;
}

TEST_F(Mpi, ZeroTwoIsRefusedByName) {
  const RunResult r = run_mpi(tiny_train({"--steps", "1", "--batch", "4", "--zero", "2"}));
  EXPECT_NE(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.err.find("--zero 2 is not supported"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("use --zero 1 or --zero 3"), std::string::npos) << r.err;
}

// A budget is one rank's whole step: its micro-batches, its reduction buffers and, with ZeRO-1, its half
// of AdamW's state. At 3.6 MiB a rank of the tiny model must recompute with replicated state and
// keeps nearly everything with sharded state; each rank's step is what its rank predicted, to the
// byte (rank 0 reports it), and remat plan --ranks 2 --zero S picks the plan train picks.
TEST_F(Mpi, BudgetIsOneRanksWholeStep) {
  std::string plans[2];
  for (int z : {0, 1}) {
    SCOPED_TRACE("--zero " + std::to_string(z));
    const std::vector<std::string> common{"--preset", "tiny", "--dropout", "0.1", "--batch", "8", "--micro-batch", "2",
                                          "--threads", "1", "--zero", std::to_string(z)};
    const RunResult r = train_budget("3.6MiB", "2", common);
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.out, m, std::regex("plan for --step-budget 3.60 MiB \\(whole step\\): (.*), attention naive; "
                                                       "predicted whole step ([0-9.]+) MiB")))
        << r.out;
    plans[z] = m[1];
    EXPECT_LE(std::stod(m[2]), 3.6);
    EXPECT_NE(r.out.find("whole step: predicted = measured, to the byte"), std::string::npos) << r.out;
    std::vector<std::string> plan{"plan", "--ranks", "2", "--step-budget", "3.6MiB"};
    plan.insert(plan.end(), common.begin(), common.end());
    const RunResult p = run_remat(plan);
    ASSERT_EQ(p.exit_code, 0) << p.describe();
    EXPECT_NE(p.out.find("plan for --step-budget 3.60 MiB (whole step): " + plans[z] + ", attention naive"), std::string::npos)
        << p.out;
    EXPECT_NE(p.out.find("use: mpirun -np 2 remat train"), std::string::npos) << p.out;
  }
  EXPECT_NE(plans[0], plans[1]) << "sharding AdamW left the rank's step as it was";
  EXPECT_EQ(plans[1], "0 checkpoints, 0 block recomputes, norms on 1 block");
  // --ranks in one process runs every rank's micro-batches: not a rank's step.
  check_user_error(run_remat(tiny_train({"--ranks", "2", "--step-budget", "3.6MiB", "--batch", "8"})), 1,
                   {"--step-budget plans the step of one rank of mpirun -np 2", "mpirun -np 2"});
  check_user_error(run_remat({"plan", "--preset", "tiny", "--ranks", "2", "--zero", "2", "--step-budget", "3.6MiB"}), 1,
                   {"--step-budget with --zero 2", "use --zero 0, 1 or 3"});
  check_user_error(run_remat({"plan", "--preset", "tiny", "--ranks", "3", "--step-budget", "3.6MiB"}), 1,
                   {"--batch 8 does not split over --ranks 3"});
}

TEST_F(Mpi, ResumeContinuesBitIdenticallyAndAnotherCountIsRefused) {
  // Uninterrupted, 4 steps on 2 ranks; then 2 steps on 2 ranks emulated by one process, resumed under
  // mpirun for 2 more: the same weights.
  const std::vector<std::string> base{"--batch", "4", "--micro-batch", "2", "--dropout", "0.1", "--quiet"};
  auto args = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = tiny_train(base);
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  const RunResult full = run_mpi(args({"--steps", "4", "--save", dir / "full.safetensors"}));
  ASSERT_EQ(full.exit_code, 0) << full.describe();
  const RunResult half = run_remat(args({"--steps", "2", "--ranks", "2", "--save-dir", dir / "ck"}), "", 120);
  ASSERT_EQ(half.exit_code, 0) << half.describe();
  const RunResult rest = run_mpi(args({"--steps", "4", "--resume", dir / "ck", "--save", dir / "resumed.safetensors"}));
  ASSERT_EQ(rest.exit_code, 0) << rest.describe();
  expect_same_weights(dir / "full.safetensors", dir / "resumed.safetensors");
  // A one-rank checkpoint under mpirun -np 2: refused by name, unless --ranks asks to reshard.
  const RunResult one = run_remat(args({"--steps", "2", "--save-dir", dir / "ck1"}), "", 120);
  ASSERT_EQ(one.exit_code, 0) << one.describe();
  const RunResult refused = run_mpi(args({"--steps", "4", "--resume", dir / "ck1"}));
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("was trained on 1 rank(s), and mpirun started 2 processes"), std::string::npos)
      << refused.err;
  const RunResult resharded = run_mpi(args({"--steps", "4", "--resume", dir / "ck1", "--ranks", "2", "--zero", "1"}));
  EXPECT_EQ(resharded.exit_code, 0) << resharded.describe();
}

// ZeRO-3 under a budget: a rank's step holds its chunks, the blocks it gathers and the gradients in
// flight. At 7 MiB a rank of the 8-block tiny model fits only under ZeRO-3, gathering each replayed
// block again for its backward; at 9.5 MiB it may hold them. plan and train pick the same plan and
// gather policy, and the rank's whole step is as predicted, to the byte.
TEST_F(Mpi, ZeroThreeBudgetPlansTheGatherPolicy) {
  const std::vector<std::string> common{"--preset", "tiny", "--layers", "8", "--dropout", "0.1", "--batch", "8",
                                        "--micro-batch", "2", "--threads", "1"};
  for (const auto& [budget, shown, gather] : {std::tuple{"7MiB", "7.00 MiB", "regather"}, {"9.5MiB", "9.50 MiB", "hold"}}) {
    SCOPED_TRACE(budget);
    std::vector<std::string> plan{"plan", "--ranks", "2", "--zero", "3", "--step-budget", budget};
    plan.insert(plan.end(), common.begin(), common.end());
    const RunResult p = run_remat(plan);
    ASSERT_EQ(p.exit_code, 0) << p.describe();
    std::smatch m;
    ASSERT_TRUE(std::regex_search(p.out, m, std::regex(std::string("plan for --step-budget ") + shown +
                                                       " \\(whole step\\): (.*), attention naive, --gather " + gather + "\n")))
        << p.out;
    const std::string chosen = m[1];
    std::vector<std::string> flags{"--zero", "3"};
    flags.insert(flags.end(), common.begin(), common.end());
    const RunResult r = train_budget(budget, "2", flags);
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_NE(r.out.find(std::string("plan for --step-budget ") + shown + " (whole step): " + chosen + ", attention naive, --gather " +
                         gather + "; predicted whole step"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("whole step: predicted = measured, to the byte"), std::string::npos) << r.out;
  }
  // At 8 MiB regather's plan has a little less compute; over a slow link its extra all-gathers cost
  // more than that, and hold is taken. train told --gather hold plans that same plan.
  std::vector<std::string> plan{"plan", "--ranks", "2", "--zero", "3", "--step-budget", "8MiB"};
  plan.insert(plan.end(), common.begin(), common.end());
  const RunResult fast = run_remat(plan);
  ASSERT_EQ(fast.exit_code, 0) << fast.describe();
  EXPECT_NE(fast.out.find(", attention naive, --gather regather\n"), std::string::npos) << fast.out;
  plan.insert(plan.end(), {"--bandwidth", "10Mbit"});
  const RunResult slow = run_remat(plan);
  ASSERT_EQ(slow.exit_code, 0) << slow.describe();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(slow.out, m, std::regex("plan for --step-budget 8.00 MiB \\(whole step\\): (.*), attention naive, "
                                                        "--gather hold\n")))
      << slow.out;
  EXPECT_NE(slow.out.find("(compute plus every collective at --bandwidth, none hidden)"), std::string::npos) << slow.out;
  EXPECT_NE(slow.out.find("--zero 3 --gather hold"), std::string::npos) << slow.out;  // the use: line
  std::vector<std::string> flags{"--zero", "3", "--gather", "hold"};
  flags.insert(flags.end(), common.begin(), common.end());
  const RunResult held = train_budget("8MiB", "1", flags);
  ASSERT_EQ(held.exit_code, 0) << held.describe();
  EXPECT_NE(held.out.find("plan for --step-budget 8.00 MiB (whole step): " + std::string(m[1]) + ", attention naive, --gather hold;"),
            std::string::npos)
      << held.out;
  std::vector<std::string> zero1{"plan", "--ranks", "2", "--zero", "1", "--step-budget", "7MiB"};
  zero1.insert(zero1.end(), common.begin(), common.end());
  check_user_error(run_remat(zero1), 1, {"--step-budget 7.00 MiB is below the least whole-step peak of any plan"});
}

// A ZeRO-3 run saves whole weights and moments and resumes bit-identically, under ZeRO-3 or ZeRO-0
// (where the state lives changes no bit); validation between steps gathers the model and the next step
// shards it again, changing nothing.
TEST_F(Mpi, ZeroThreeResumesBitIdentically) {
  const std::vector<std::string> base{"train", "--preset", "tiny", "--sample-tokens", "0", "--no-progress", "--batch", "4",
                                      "--micro-batch", "2", "--dropout", "0.1", "--quiet", "--layers", "3", "--precision", "bf16"};
  auto args = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    if (std::find(extra.begin(), extra.end(), "--eval-every") == extra.end()) a.insert(a.end(), {"--eval-every", "0"});
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  const RunResult full = run_mpi(args({"--steps", "4", "--zero", "3", "--save", dir / "full.safetensors"}));
  ASSERT_EQ(full.exit_code, 0) << full.describe();
  const RunResult half =
      run_mpi(args({"--steps", "2", "--zero", "3", "--eval-every", "1", "--save-dir", dir / "ck"}));
  ASSERT_EQ(half.exit_code, 0) << half.describe();
  for (const char* z : {"3", "0"}) {
    SCOPED_TRACE(std::string("resumed under --zero ") + z);
    const std::string out = dir / (std::string("resumed") + z + ".safetensors");
    const RunResult rest = run_mpi(args({"--steps", "4", "--resume", dir / "ck/step-000002", "--zero", z, "--save", out,
                                          "--save-dir", dir / (std::string("branch") + z)}));
    ASSERT_EQ(rest.exit_code, 0) << rest.describe();
    expect_same_weights(dir / "full.safetensors", out);
  }
}

TEST(PlanRanks, GatherWithoutZeroThreeIsRefused) {
  for (const std::vector<std::string>& extra : {std::vector<std::string>{"--gather", "regather"},
                                                {"--ranks", "2", "--zero", "1", "--gather", "hold"}})
    check_user_error(run_remat(tiny_train(extra)), 1,
                     {"--gather says when ZeRO-3 gathers the blocks' parameters", "it would change nothing", "--zero 3"});
  check_user_error(run_remat(tiny_train({"--gather", "always"})), 1,
                   {"--gather must be hold or regather, got 'always'", "e.g. --gather regather"});
}

TEST(PlanRanks, PrintsTheModelStatePerRankBesideThePapers) {
  const RunResult r = run_remat({"plan", "--preset", "gpt2", "--layers", "36", "--channels", "4096", "--heads", "32",
                                 "--ranks", "64", "--zero", "3", "--threads", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  for (const char* s : {"model state per rank over 64 ranks", "119.4 GB   119.4 GB", "31.2 GB   60.6 GB", "16.6 GB   not supported",
                        "1.9 GB   1.9 GB (parameters 0.5 GB, gradients 0.5 GB, AdamW 0.9 GB)", "<- --zero", "why they differ"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  const RunResult z3 = run_remat({"plan", "--preset", "tiny", "--layers", "9", "--ranks", "2", "--zero", "3"});
  ASSERT_EQ(z3.exit_code, 0) << z3.describe();
  EXPECT_NE(z3.out.find("ZeRO-3 all-gathers per micro-batch"), std::string::npos) << z3.out;
  EXPECT_NE(z3.out.find("  sqrt            9        12      8 (3 blocks held)         27"), std::string::npos) << z3.out;
  const RunResult j = run_remat({"plan", "--preset", "tiny", "--ranks", "2", "--json"});
  EXPECT_EQ(j.exit_code, 1) << j.describe();
  EXPECT_NE(j.err.find("--json with --ranks is not supported yet"), std::string::npos) << j.err;
}

TEST_F(Mpi, AnInterruptStopsEveryRankAtOneStepAndRankZeroSaves) {
  // Ctrl-C on mpirun: it passes SIGTERM to the ranks, which agree on the step, and rank 0 writes the
  // checkpoint before any rank exits; the run resumes from it.
  SpawnOptions o;
  o.launcher = mpirun(2);
  const std::string metrics = dir / "m.jsonl";
  Child c(tiny_train({"--steps", "100000", "--batch", "4", "--save-dir", dir / "ck", "--metrics-out", metrics}), o);
  ASSERT_TRUE(c.wait_for_lines(metrics, 3, 120)) << "no step was logged";
  c.signal(SIGINT);
  const RunResult r = c.finish(120);
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.err.find("interrupted at step"), std::string::npos) << r.describe();
  EXPECT_NE(r.err.find("saved checkpoint"), std::string::npos) << r.describe();
  bool found = false;
  for (const auto& e : fs::directory_iterator(dir / "ck")) found = found || e.path().filename().string().rfind("step-", 0) == 0;
  EXPECT_TRUE(found) << "no checkpoint in " << dir / "ck";
}

namespace {
// A 50-step tiny run on 2 ranks (MPMD), rank 1 with `env` set: the job's result.
RunResult run_with_rank1_env(const std::string& env) {
  SpawnOptions o;
  o.launcher = mpirun(1);
  o.launcher.insert(o.launcher.end(), {REMAT_BINARY, "train", "--preset", "tiny", "--steps", "50", "--batch", "4",
                                       "--eval-every", "0", "--sample-tokens", "0", "--no-progress", ":", "-np", "1",
                                       "-x", env});
  return Child(tiny_train({"--steps", "50", "--batch", "4"}), o).finish(120);
}
}  // namespace

TEST_F(Mpi, ARankKilledMidStepStopsEveryRank) {
  // Rank 1 dies at its third step (SIGKILL: nothing of remat's runs), rank 0 is inside a collective:
  // the job ends, with a non-zero status, instead of waiting forever.
  const RunResult r = run_with_rank1_env("REMAT_TEST_SIGNAL=step:9:3");
  EXPECT_FALSE(r.timed_out) << "a rank that dies must not leave the other waiting";
  EXPECT_NE(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.out.find("val loss"), std::string::npos) << "the run cannot have finished: " << r.out;
}

TEST_F(Mpi, ARankFailingMidStepStopsEveryRankWithItsMessage) {
  // Rank 1 raises an error at its third step while rank 0 is inside a collective: the job ends with
  // rank 1's message and a non-zero status, and no rank is left waiting.
  const RunResult r = run_with_rank1_env("REMAT_TEST_FAIL=step:3");
  EXPECT_FALSE(r.timed_out) << "a rank that fails must not leave the other waiting";
  EXPECT_NE(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.err.find("injected failure at step 3"), std::string::npos) << r.describe();
  EXPECT_EQ(r.out.find("val loss"), std::string::npos) << "the run cannot have finished: " << r.out;
}

TEST(PlanRanks, BadRankFlagsAreRefusedByName) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--zero", "1"}, "--zero needs --ranks"},
      {{"--ranks", "2", "--zero", "4"}, "--zero must be 0, 1, 2 or 3, got 4"},
      {{"--ranks", "0"}, "--ranks must be between 1 and 1000000, got 0"},
      {{"--ranks", "2", "--json"}, "--json with --ranks is not supported yet"},
      {{"--bandwidth", "25Gbit"}, "--bandwidth needs --ranks"},
      {{"--latency", "5us"}, "--latency needs --ranks"},
      {{"--ranks", "2", "--latency", "5us"}, "--latency needs --bandwidth"},
      {{"--ranks", "2", "--bandwidth", "fast"}, "--bandwidth 'fast' is not a positive number with a unit"},
  };
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> args{"plan", "--preset", "tiny"};
    args.insert(args.end(), flags.begin(), flags.end());
    const RunResult r = run_remat(args);
    EXPECT_EQ(r.exit_code, 1) << r.describe();
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
  }
}

TEST(PlanRanks, BandwidthPredictsTheStepTimePerRank) {
  const RunResult r = run_remat({"plan", "--preset", "tiny", "--ranks", "4", "--zero", "3", "--bandwidth", "1GB"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find("step time per rank (1 micro-batch of 8 x T 64 on each rank), --zero 3, --bandwidth 1GB"),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("latency-bandwidth model (Hockney 1994)"), std::string::npos) << r.out;
  for (const char* s : {"\n  none ", "\n  block ", "\n  sqrt "}) EXPECT_NE(r.out.find(s), std::string::npos) << s << r.out;
}

TEST_F(Mpi, RanksOtherThanTheProcessCountAreRefused) {
  const RunResult r = run_mpi(tiny_train({"--steps", "1", "--batch", "6", "--micro-batch", "2", "--ranks", "3"}));
  EXPECT_NE(r.exit_code, 0) << r.describe();
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.err.find("--ranks 3 but mpirun started 2 processes"), std::string::npos) << r.err;
}

// Each rank's process (its peak resident set, VmHWM) beside its prediction, printed by rank 0: within
// the bound tests/cli/test_process_memory.cpp states for one process. Resident sets mean nothing
// under AddressSanitizer (its shadow memory is in them).
TEST_F(Mpi, ZeroThreeRanksStayWithinTheirPredictedProcess) {
#ifdef REMAT_CLI_TEST_ASAN
  GTEST_SKIP() << "AddressSanitizer's shadow memory is part of the resident set";
#endif
  const RunResult r = run_mpi({"train", "--layers", "4", "--channels", "128", "--heads", "4", "--seq", "128", "--batch",
                               "8", "--zero", "3", "--steps", "2", "--eval-every", "0", "--sample-tokens", "0",
                               "--threads", "1", "--no-progress"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex("process peak of each rank: rank 0 ([0-9.]+) MiB \\(predicted "
                                                     "([0-9.]+) MiB\\), rank 1 ([0-9.]+) MiB \\(predicted ([0-9.]+) MiB\\)")))
      << r.out;
  for (int rank : {0, 1}) {
    const double peak = std::stod(m[size_t(1 + 2 * rank)]), predicted = std::stod(m[size_t(2 + 2 * rank)]);
    EXPECT_LE(peak, predicted) << "rank " << rank << "\n" << r.out;
    EXPECT_LE(predicted, peak * 1.02 + 8) << "rank " << rank << "\n" << r.out;
  }
}
