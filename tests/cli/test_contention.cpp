// OpenMP threads that wait under contention (src/cli/main.cpp): with neither OMP_WAIT_POLICY nor
// GOMP_SPINCOUNT set, `remat` re-executes itself with a short GOMP_SPINCOUNT, so that idle OpenMP
// threads soon sleep instead of spinning for milliseconds; a user's setting wins. libgomp itself is
// the witness: with OMP_DISPLAY_ENV=verbose it prints, as it initialises, the spin count it will use
// (300000 for its default, 0 for passive, 30000000000 for active). No timing here:
// bench/bench_contention.sh measures.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <regex>

#include "run.h"

namespace {

using namespace remat_cli_test;

// Sets (or, with nullopt, removes) environment variables for the children started in its scope.
class ScopedEnv {
 public:
  ScopedEnv(std::initializer_list<std::pair<const char*, std::optional<std::string>>> vars) {
    for (const auto& [name, value] : vars) {
      const char* old = std::getenv(name);
      saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
      if (value)
        setenv(name, value->c_str(), 1);
      else
        unsetenv(name);
    }
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_) {
      if (value)
        setenv(name.c_str(), value->c_str(), 1);
      else
        unsetenv(name.c_str());
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

// The GOMP_SPINCOUNT of every OPENMP DISPLAY ENVIRONMENT block libgomp printed, in order: one block
// per image of the process (two when remat re-executed itself).
std::vector<std::string> spin_counts(const std::string& err) {
  static const std::regex re("GOMP_SPINCOUNT = '([0-9]+)'");
  std::vector<std::string> r;
  for (auto it = std::sregex_iterator(err.begin(), err.end(), re); it != std::sregex_iterator(); ++it)
    r.push_back((*it)[1]);
  return r;
}

// libgomp's own spin count, with OMP_WAIT_POLICY and GOMP_SPINCOUNT unset.
const std::string kLibgompDefault = "300000";

// remat's default, as `remat --version` states it.
std::string stated_default(const std::string& out) {
  static const std::regex re("OpenMP wait policy: GOMP_SPINCOUNT=([0-9]+): idle threads spin briefly, then sleep, "
                             "and train, bench and sample run on the cores other busy processes leave "
                             "\\(remat's default; set OMP_WAIT_POLICY or GOMP_SPINCOUNT to choose another\\)");
  std::smatch m;
  return std::regex_search(out, m, re) ? std::string(m[1]) : std::string();
}

RunResult version_with(std::optional<std::string> policy, std::optional<std::string> spin) {
  ScopedEnv env({{"OMP_WAIT_POLICY", policy}, {"GOMP_SPINCOUNT", spin}, {"OMP_DISPLAY_ENV", "verbose"},
                 {"REMAT_OPENMP_DEFAULTED", std::nullopt}});
  return run_remat({"--version"});
}

}  // namespace

TEST(CliContention, DefaultIsAShortSpinInLibgomp) {
  const RunResult r = version_with(std::nullopt, std::nullopt);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const std::string n = stated_default(r.out);
  ASSERT_FALSE(n.empty()) << r.out;
  EXPECT_LE(std::stoll(n) * 10, std::stoll(kLibgompDefault)) << "not a short spin";
  // The first image ran on libgomp's default; the re-executed one on remat's.
  EXPECT_EQ(spin_counts(r.err), (std::vector<std::string>{kLibgompDefault, n})) << r.err;
}

TEST(CliContention, UsersSettingWins) {
  struct Case {
    std::optional<std::string> policy, spin;
    std::string libgomp_spin, shown;
  };
  for (const Case& c : {Case{"active", std::nullopt, "30000000000", "OMP_WAIT_POLICY=active"},
                        Case{"passive", std::nullopt, "0", "OMP_WAIT_POLICY=passive"},
                        Case{std::nullopt, "12345", "12345", "GOMP_SPINCOUNT=12345"},
                        Case{"active", "777", "777", "OMP_WAIT_POLICY=active GOMP_SPINCOUNT=777"}}) {
    const RunResult r = version_with(c.policy, c.spin);
    SCOPED_TRACE(c.shown);
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_EQ(spin_counts(r.err), std::vector<std::string>{c.libgomp_spin}) << "no re-exec\n" << r.err;
    EXPECT_NE(r.out.find("OpenMP wait policy: as set in the environment: " + c.shown), std::string::npos) << r.out;
  }
}

// A stray marker (say, copied from a remat's environment) neither stops the default nor loops.
TEST(CliContention, StrayMarkerIsIgnored) {
  ScopedEnv env({{"OMP_WAIT_POLICY", std::nullopt}, {"GOMP_SPINCOUNT", std::nullopt}, {"OMP_DISPLAY_ENV", "verbose"},
                 {"REMAT_OPENMP_DEFAULTED", "1"}});
  const RunResult r = run_remat({"--version"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const std::string n = stated_default(r.out);
  ASSERT_FALSE(n.empty()) << r.out;
  EXPECT_EQ(spin_counts(r.err), (std::vector<std::string>{kLibgompDefault, n})) << r.err;
}

// The re-exec keeps the process: its argv (an unknown flag is still named, with exit status 2), and
// its pid (a SIGTERM sent to the child that was started reaches the training loop, which stops
// after the step and exits 143, as without the re-exec).
TEST(CliContention, ReexecKeepsArgvExitStatusAndSignals) {
  ScopedEnv env({{"OMP_WAIT_POLICY", std::nullopt}, {"GOMP_SPINCOUNT", std::nullopt}, {"OMP_DISPLAY_ENV", "verbose"},
                 {"REMAT_OPENMP_DEFAULTED", std::nullopt}});
  const RunResult bad = run_remat({"train", "--stesp", "3"});
  EXPECT_EQ(bad.exit_code, 2) << bad.describe();
  EXPECT_NE(bad.err.find("unknown flag --stesp for 'remat train' (hint: did you mean --steps?)"), std::string::npos)
      << bad.err;

  TempDir d;
  Child c(tiny_train({"--steps", "100000", "--metrics-out", d / "m.jsonl"}));
  ASSERT_TRUE(c.wait_for_lines(d / "m.jsonl", 1));
  c.signal(SIGTERM);
  const RunResult r = c.finish();
  EXPECT_EQ(r.exit_code, 143) << r.describe();
  EXPECT_NE(r.err.find("interrupted at step"), std::string::npos) << r.err;
  const std::vector<std::string> counts = spin_counts(r.err);
  ASSERT_EQ(counts.size(), 2u) << "the child did not re-execute\n" << r.err;
  EXPECT_EQ(counts[0], kLibgompDefault);
  EXPECT_NE(counts[1], kLibgompDefault);
}

// The adaptive thread count (core/threads.h): REMAT_TEST_OTHERS scripts what each step's reading of
// /proc finds, so that the team shrinks to one thread and grows back twice in a run (and a single
// busy or free reading moves nothing). The
// weights after it are those of a run fixed at 2 threads, bit for bit, with dropout on, for GPT-2
// in fp32 and LLaMA in bf16 with flash attention. The run says once that it shrank; a fixed count
// (--threads, OMP_NUM_THREADS) or a wait policy of the user's turns adaptation off.
TEST(CliContention, AdaptingTheThreadCountMidRunChangesNoBit) {
  const std::string shrank = "remat: 1 other busy task on this machine's 2 cores: running on 1 thread while it runs";
  const std::vector<std::vector<std::string>> models = {
      {"--dropout", "0.1"},
      {"--arch", "llama", "--precision", "bf16", "--attention", "flash", "--dropout", "0.1"}};
  for (const auto& model : models) {
    SCOPED_TRACE(model[1]);
    TempDir d;
    auto run = [&](std::vector<std::string> extra, std::optional<std::string> omp_threads,
                   std::optional<std::string> policy, const std::string& out) {
      ScopedEnv env({{"OMP_WAIT_POLICY", policy}, {"GOMP_SPINCOUNT", std::nullopt}, {"OMP_NUM_THREADS", omp_threads},
                     {"REMAT_OPENMP_DEFAULTED", std::nullopt}, {"REMAT_TEST_OTHERS", "0,1,1,1,1,1,0,1,0,0,0,1,1,1,1,1,1,0,0,0,1,1"}});
      std::vector<std::string> a = model;
      a.insert(a.end(), {"--steps", "22", "--save", d / out});
      a.insert(a.end(), extra.begin(), extra.end());
      SpawnOptions o;
      o.one_thread = false;
      return Child(tiny_train(a), o).finish(120);
    };
    const RunResult fixed = run({"--threads", "2"}, std::nullopt, std::nullopt, "fixed.safetensors");
    ASSERT_EQ(fixed.exit_code, 0) << fixed.describe();
    EXPECT_EQ(fixed.err.find("busy task"), std::string::npos) << "--threads fixes the count\n" << fixed.err;
    const RunResult adaptive = run({}, std::nullopt, std::nullopt, "adaptive.safetensors");
    ASSERT_EQ(adaptive.exit_code, 0) << adaptive.describe();
    size_t at = adaptive.err.find(shrank);
    ASSERT_NE(at, std::string::npos) << "the team never shrank\n" << adaptive.err;
    EXPECT_EQ(adaptive.err.find(shrank, at + 1), std::string::npos) << "said more than once\n" << adaptive.err;
    EXPECT_EQ(slurp(d / "adaptive.safetensors"), slurp(d / "fixed.safetensors")) << "adapting changed the weights";
    const RunResult env_count = run({}, "2", std::nullopt, "env.safetensors");
    ASSERT_EQ(env_count.exit_code, 0) << env_count.describe();
    EXPECT_EQ(env_count.err.find("busy task"), std::string::npos) << "OMP_NUM_THREADS fixes the count\n" << env_count.err;
    const RunResult passive = run({}, std::nullopt, "passive", "passive.safetensors");
    ASSERT_EQ(passive.exit_code, 0) << passive.describe();
    EXPECT_EQ(passive.err.find("busy task"), std::string::npos) << "the user's wait policy\n" << passive.err;
  }
}
