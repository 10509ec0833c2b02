// One table of flags (src/cli/flag_table.h): every flag that two subcommands share means the same
// thing there, shows the same argument and has the same default, read off each subcommand's --help
// as a user reads it. Renamed flags (bench's --steps and --warmup, calibrate's --warmup, which meant
// something else than train's) are refused with the new name.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli/flag_table.h"
#include "run.h"

namespace {

using namespace remat_cli_test;
using remat::cli::default_in;
using remat::cli::find_shared_flag;
using remat::cli::kHere;
using remat::cli::kSharedFlags;

struct Shown {
  std::string arg;   // the argument's name ("" for a switch)
  std::string dflt;  // after '=' ("" when none is shown)
  std::string help;
};

// Every --flag of `remat <command> --help`, as CLI11 lays it out: "  --name ARG[:{choices}][=default]
// [...] [REQUIRED]", then two or more spaces and the help, or the help alone on the next line when
// the first column is full.
std::map<std::string, Shown> flags_of(const std::string& command) {
  const RunResult r = run_remat({command, "--help"});
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  std::map<std::string, Shown> m;
  std::vector<std::string> lines;
  std::istringstream in(r.out);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  static const std::regex head(R"(^  (--[a-z0-9-]+)(?: (\S.*?))?(?:\s{2,}(\S.*))?$)");
  for (size_t i = 0; i < lines.size(); ++i) {
    std::smatch h;
    if (!std::regex_match(lines[i], h, head)) continue;
    const std::string name = h[1];
    if (name == "--help" || name == "--help-all") continue;
    Shown s;
    std::string spec = h[2];
    s.help = h[3];
    if (s.help.empty() && i + 1 < lines.size()) s.help = std::regex_replace(lines[i + 1], std::regex("^\\s+"), "");
    for (const char* tail : {" REQUIRED", " ..."})
      if (spec.size() >= std::strlen(tail) && spec.compare(spec.size() - std::strlen(tail), std::string::npos, tail) == 0)
        spec.erase(spec.size() - std::strlen(tail));
    const size_t eq = spec.find('=');
    if (eq != std::string::npos) s.dflt = spec.substr(eq + 1), spec.erase(eq);
    s.arg = spec.substr(0, spec.find(":{"));
    m[name] = s;
  }
  return m;
}

std::vector<std::string> subcommands() {
  const RunResult r = run_remat({"--help"});
  std::vector<std::string> v;
  const size_t at = r.out.find("Subcommands:");
  EXPECT_NE(at, std::string::npos) << r.out;
  std::istringstream in(r.out.substr(at));
  static const std::regex row(R"(^  ([a-z]+)\s{2,}.*)");
  for (std::string l; std::getline(in, l);) {
    std::smatch m;
    if (std::regex_match(l, m, row)) v.push_back(m[1]);
  }
  return v;
}

}  // namespace

TEST(CliFlags, EveryFlagMeansOneThingInEverySubcommand) {
  const std::vector<std::string> commands = subcommands();
  ASSERT_GE(commands.size(), 8u);
  std::map<std::string, std::map<std::string, Shown>> all;  // command -> flag -> shown
  std::map<std::string, std::vector<std::string>> owners;   // flag -> commands
  for (const std::string& c : commands) {
    all[c] = flags_of(c);
    ASSERT_FALSE(all[c].empty()) << c;
    for (const auto& [name, shown] : all[c]) owners[name].push_back(c);
  }
  std::set<std::string> used;
  for (const auto& [name, cmds] : owners) {
    const auto* f = find_shared_flag(name);
    if (cmds.size() > 1) {
      EXPECT_TRUE(f) << name << " is taken by " << cmds.size() << " subcommands and is not in flag_table.h";
    }
    if (!f) continue;
    used.insert(name);
    for (const std::string& c : cmds) {
      SCOPED_TRACE("remat " + c + " " + name);
      const Shown& s = all[c][name];
      EXPECT_EQ(s.arg, std::string(f->arg)) << "the argument's name";
      EXPECT_EQ(s.dflt, std::string(default_in(*f, c))) << "the default";
      ASSERT_EQ(s.help.rfind(std::string(f->help), 0), 0u) << "the meaning: " << s.help;
      const std::string rest = s.help.substr(f->help.size());
      EXPECT_TRUE(rest.empty() || rest.rfind(std::string(kHere), 0) == 0) << "another meaning: " << rest;
    }
  }
  for (const auto& f : kSharedFlags) EXPECT_TRUE(used.count(std::string(f.name))) << f.name << ": no subcommand takes it";
  // The flags the issue named: one meaning each.
  EXPECT_EQ(owners["--steps"], std::vector<std::string>{"train"});
  EXPECT_EQ(owners["--warmup"], std::vector<std::string>{"train"});
  EXPECT_EQ(all["sample"]["--seed"].dflt, all["train"]["--seed"].dflt);
  EXPECT_EQ(all["calibrate"]["--seed"].dflt, all["bench"]["--seed"].dflt);
}

// The defaults in the table are the values the commands use, not only what --help prints: bench and
// train draw the same initial weights and batches without --seed (the same first loss).
TEST(CliFlags, TheTablesDefaultIsTheValueUsed) {
  TempDir d;
  const RunResult t = run_remat(tiny_train({"--steps", "1", "--batch", "2", "--metrics-out", d / "m.jsonl"}));
  ASSERT_EQ(t.exit_code, 0) << t.describe();
  const RunResult s = run_remat(tiny_train({"--steps", "1", "--batch", "2", "--seed", "1337", "--metrics-out",
                                            d / "s.jsonl"}));
  ASSERT_EQ(s.exit_code, 0) << s.describe();
  EXPECT_EQ(slurp(d / "m.jsonl").substr(0, 40), slurp(d / "s.jsonl").substr(0, 40)) << "--seed's default is 1337";
  const RunResult g = run_remat({"grads", "--help"});
  EXPECT_NE(g.out.find("--batch B=8"), std::string::npos) << g.out;
}

TEST(CliFlags, RenamedFlagsAreRefusedWithTheirNewName) {
  check_user_error(run_remat({"bench", "--steps", "3"}), 2,
                   {"unknown flag --steps for 'remat bench'", "did you mean --timed-steps?",
                    "--steps is a flag of 'remat train'"});
  check_user_error(run_remat({"bench", "--warmup", "1"}), 2, {"did you mean --untimed-steps?"});
  check_user_error(run_remat({"calibrate", "--warmup", "1", "--out", "c.json"}), 2, {"did you mean --untimed-rounds?"});
  check_user_error(run_remat({"calibrate", "--batch", "8", "--micro-batch", "3", "--out", "c.json"}), 1,
                   {"--micro-batch 3 must divide --batch 8"});
  check_user_error(run_remat({"bench", "--attention", "auto"}), 1, {"--attention auto", "remat bench makes no plan"});
  check_user_error(run_remat({"grads", "--attention", "auto", "--init-from", "m", "--data", "d", "--out", "g"}), 1,
                   {"--attention auto", "remat grads makes no plan"});
}
