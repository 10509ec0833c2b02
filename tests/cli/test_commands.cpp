// The `remat` subcommands end to end, on tiny models: help text, the trace of one step, training
// metrics and weights on disk, the determinism check, bench's JSON and table, and plan's budget.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "run.h"

namespace {

using namespace remat_cli_test;
using nlohmann::json;

bool has(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

// Runs and requires exit 0 with an empty-or-progress-free stderr; returns the result.
RunResult ok(const std::vector<std::string>& args, const std::string& cwd = "") {
  RunResult r = run_remat(args, cwd);
  EXPECT_TRUE(r.exited() && r.exit_code == 0) << r.describe();
  return r;
}

// ---- help ----

TEST(CliCommands, HelpDocumentsEveryFlag) {
  const RunResult root = ok({"--help"});
  for (const char* sub : {"train", "bench", "trace", "plan"})
    EXPECT_TRUE(std::regex_search(root.out, std::regex(std::string("\\n  ") + sub + " +\\S"))) << sub << root.out;
  EXPECT_TRUE(has(root.out, "--help-all")) << root.out;

  const RunResult train = ok({"train", "--help"});
  const RunResult all = ok({"--help-all"});
  for (const char* flag : {"--layers", "--channels", "--heads", "--seq", "--vocab", "--preset", "--data", "--steps",
                           "--batch", "--micro-batch", "--lr", "--dropout", "--seed", "--threads", "--eval-every",
                           "--save", "--init-from", "--metrics-out", "--recompute", "--recompute-last",
                           "--determinism-check"}) {
    // The flag as a whole word at the start of a help line, followed by its description.
    const std::regex line(std::string("\\n +") + flag + "(?![\\w-])[^\\n]*\\S[^\\n]*\\n");
    EXPECT_TRUE(std::regex_search(train.out, line)) << flag << " missing from `remat train --help`";
    EXPECT_TRUE(std::regex_search(all.out, line)) << flag << " missing from `remat --help-all`";
  }
}

// ---- trace ----

// The event column of `remat trace` lines ("  7  backward  block 2   ...  activations live ...").
std::vector<std::string> trace_events(const std::string& out) {
  std::vector<std::string> ev;
  const std::regex re("^ *([0-9]+)  (.*\\S) +activations live +[0-9.]+ [KMG]?i?B$");
  for (const auto& line : split_lines(out)) {
    std::smatch m;
    if (std::regex_match(line, m, re)) {
      EXPECT_EQ(std::stoi(m[1]), int(ev.size()) + 1) << line;  // numbered 1, 2, 3, ...
      ev.push_back(m[2]);
    }
  }
  return ev;
}

struct Summary {
  int forwards = -1, recomputes = -1, backwards = -1;
};
Summary trace_summary(const std::string& out) {
  std::smatch m;
  Summary s;
  if (std::regex_search(out, m, std::regex("block forwards ([0-9]+), recomputes ([0-9]+), backwards ([0-9]+);")))
    s = {std::stoi(m[1]), std::stoi(m[2]), std::stoi(m[3])};
  return s;
}

// trace --policy, as train's: the policy's drops show in the measured peak, which its prediction
// matches, and the title names it; an unknown preset is refused by name, and so is --policy with --plan.
TEST(CliCommands, TraceTakesAPolicy) {
  const auto peak = [](const std::string& out) {
    std::smatch m;
    EXPECT_TRUE(std::regex_search(out, m, std::regex("peak activation (\\S+ \\S+) measured, (\\S+ \\S+) predicted"))) << out;
    EXPECT_EQ(m[1].str(), m[2].str()) << out;
    return m[1].str();
  };
  const RunResult none = ok({"trace", "--layers", "3", "--recompute", "none"});
  const RunResult sel = ok({"trace", "--layers", "3", "--recompute", "none", "--policy", "selective"});
  EXPECT_TRUE(has(sel.out, "strategy none, policy selective")) << sel.out;
  EXPECT_NE(peak(none.out), peak(sel.out));
  const RunResult bad = run_remat({"trace", "--layers", "3", "--policy", "bogus"});
  EXPECT_EQ(bad.exit_code, 1) << bad.describe();
  EXPECT_TRUE(has(bad.err, "unknown policy 'bogus'")) << bad.err;
  TempDir d;
  ok({"plan", "--layers", "3", "--step-budget", "64MiB", "--out", d / "p.json"});
  const RunResult both = run_remat({"trace", "--layers", "3", "--plan", d / "p.json", "--policy", "selective"});
  EXPECT_EQ(both.exit_code, 1) << both.describe();
  EXPECT_TRUE(has(both.err, "--policy cannot be combined with --plan")) << both.err;
}

TEST(CliCommands, TraceBlockSkipsTheLastRecompute) {
  const RunResult r = ok({"trace", "--layers", "3", "--recompute", "block"});
  const std::vector<std::string> expect{
      "forward   embedding",
      "forward   block 0  (keep input x0 as checkpoint)",
      "forward   block 1  (keep input x1 as checkpoint)",
      "forward   block 2  (keep internals)",
      "forward   head (final norm, LM head, loss)",
      "backward  head",
      "backward  block 2",
      "recompute block 1  (keep internals)",
      "backward  block 1",
      "free      checkpoint x1",
      "recompute block 0  (keep internals)",
      "backward  block 0",
      "free      checkpoint x0",
      "backward  embedding",
      "optimizer step (gradient norm, AdamW)",
  };
  EXPECT_EQ(trace_events(r.out), expect) << r.out;
  const Summary s = trace_summary(r.out);
  EXPECT_EQ(s.forwards, 3);
  EXPECT_EQ(s.recomputes, 2);
  EXPECT_EQ(s.backwards, 3);
  EXPECT_TRUE(has(r.out, "blocks ran 1 to 2 times")) << r.out;
  // The measured peak is the predicted one.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex("peak activation (\\S+ \\S+) measured, (\\S+ \\S+) predicted")));
  EXPECT_EQ(m[1], m[2]);
}

TEST(CliCommands, TraceBlockWithRecomputeLastRunsEveryBlockTwice) {
  const RunResult r = ok({"trace", "--layers", "3", "--recompute", "block", "--recompute-last"});
  const std::vector<std::string> expect{
      "forward   embedding",
      "forward   block 0  (keep input x0 as checkpoint)",
      "forward   block 1  (keep input x1 as checkpoint)",
      "forward   block 2  (keep input x2 as checkpoint)",
      "forward   head (final norm, LM head, loss)",
      "backward  head",
      "recompute block 2  (keep internals)",
      "backward  block 2",
      "free      checkpoint x2",
      "recompute block 1  (keep internals)",
      "backward  block 1",
      "free      checkpoint x1",
      "recompute block 0  (keep internals)",
      "backward  block 0",
      "free      checkpoint x0",
      "backward  embedding",
      "optimizer step (gradient norm, AdamW)",
  };
  const auto ev = trace_events(r.out);
  EXPECT_EQ(ev, expect) << r.out;
  for (int i = 0; i < 3; ++i) {
    const std::string b = "block " + std::to_string(i) + "  (";
    EXPECT_EQ(std::count_if(ev.begin(), ev.end(), [&](const std::string& e) { return e.rfind("forward   " + b, 0) == 0; }), 1);
    EXPECT_EQ(std::count_if(ev.begin(), ev.end(), [&](const std::string& e) { return e.rfind("recompute " + b, 0) == 0; }), 1);
  }
  EXPECT_EQ(trace_summary(r.out).recomputes, 3);
  EXPECT_TRUE(has(r.out, "every block ran twice")) << r.out;
}

TEST(CliCommands, TraceAllRecomputeCounts) {
  const RunResult a = ok({"trace", "--layers", "3", "--recompute", "all"});
  const Summary s = trace_summary(a.out);
  EXPECT_EQ(s.forwards, 3);
  EXPECT_EQ(s.recomputes, 3);  // L(L-1)/2
  EXPECT_EQ(s.backwards, 3);
  const auto ev = trace_events(a.out);
  EXPECT_EQ(std::count_if(ev.begin(), ev.end(), [](const std::string& e) { return e.rfind("recompute ", 0) == 0; }), 3);
  EXPECT_FALSE(has(a.out, "every block ran twice")) << a.out;  // block 0 ran 3 times, block 2 once
  EXPECT_TRUE(has(a.out, "blocks ran 1 to 3 times")) << a.out;

  const RunResult b = ok({"trace", "--layers", "3", "--recompute", "all", "--recompute-last"});
  EXPECT_EQ(trace_summary(b.out).recomputes, 6);  // L(L+1)/2
  EXPECT_EQ(trace_events(b.out).size(), ev.size() + 3);
}

// ---- train ----

TEST(CliCommands, TrainWritesMetricsAndTheReport) {
  TempDir d;
  const RunResult r =
      ok({"train", "--preset", "tiny", "--steps", "3", "--eval-every", "2", "--sample-tokens", "0", "--no-progress",
          "--metrics-out", d / "m.jsonl"},
         d.path());
  EXPECT_TRUE(has(r.out, "equal to the byte")) << r.out;
  EXPECT_TRUE(has(r.out, "== memory report:")) << r.out;
  const auto lines = split_lines(slurp(d / "m.jsonl"));
  ASSERT_EQ(lines.size(), 3u);
  // The activation peak a `none` step measures is the planner's prediction for it.
  const json plan = json::parse(ok({"plan", "--preset", "tiny", "--recompute", "none", "--json"}).out);
  const size_t predicted = plan.at(0).at("predicted_activation_bytes").get<size_t>();
  for (size_t i = 0; i < lines.size(); ++i) {
    SCOPED_TRACE(lines[i]);
    const json j = json::parse(lines[i]);
    EXPECT_EQ(j.at("step").get<int>(), int(i) + 1);
    const double loss = j.at("loss").get<double>();
    EXPECT_TRUE(loss > 4.5 && loss < 6.5) << loss;  // near ln(256) = 5.55 at the start
    EXPECT_NEAR(j.at("lr").get<double>(), 1e-3 * double(i + 1) / 20.0, 1e-9);  // warmup 20
    EXPECT_GT(j.at("tokens_per_s").get<double>(), 0);
    EXPECT_EQ(j.at("peak_activation_bytes").get<size_t>(), predicted);
    // Evaluated on step 2 (every 2) and step 3 (the last), not on step 1.
    EXPECT_EQ(j.contains("val_loss"), i >= 1);
    if (j.contains("val_loss")) {
      EXPECT_TRUE(std::isfinite(j["val_loss"].get<double>()));
    }
  }
  EXPECT_EQ(d.listing(), std::vector<std::string>{"m.jsonl"});
}

TEST(CliCommands, DeterminismCheckPassesAndCatchesABrokenReplay) {
  const std::vector<std::string> args{"--steps", "1", "--recompute", "block", "--dropout", "0.1",
                                      "--determinism-check"};
  const RunResult good = ok(tiny_train(args));
  EXPECT_TRUE(has(good.out, "strategy block")) << good.out;

  auto broken_args = args;
  broken_args.push_back("--debug-break-replay");
  const RunResult bad = run_remat(tiny_train(broken_args));
  SCOPED_TRACE(bad.describe());
  ASSERT_TRUE(bad.exited());
  EXPECT_NE(bad.exit_code, 0);
  const auto lines = split_lines(bad.err);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].rfind("remat: [determinism] ", 0), 0u);
  EXPECT_TRUE(std::regex_search(lines[0], std::regex("'h\\.[0-9]+\\.[a-z_.0-9]+'"))) << "names a tensor";
  EXPECT_TRUE(std::regex_search(lines[0], std::regex("index [0-9]+"))) << "names an index";
  EXPECT_TRUE(has(lines[0], "(hint: "));
}

TEST(CliCommands, SaveThenInitFrom) {
  TempDir d;
  const RunResult save = ok(tiny_train({"--steps", "1", "--save", d / "w.safetensors"}), d.path());
  EXPECT_TRUE(has(save.out, "weights written to " + (d / "w.safetensors"))) << save.out;
  EXPECT_EQ(d.listing(), std::vector<std::string>{"w.safetensors"});  // no temporary files left

  // A valid safetensors file: 8-byte little-endian header length, JSON header, F32 data.
  const std::string bytes = slurp(d / "w.safetensors");
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(bytes[size_t(i)]);
  ASSERT_LE(8 + n, bytes.size());
  const json h = json::parse(bytes.substr(8, n));
  EXPECT_EQ(h.at("wte.weight").at("dtype"), "F32");
  EXPECT_EQ(h.at("wte.weight").at("shape"), json::array({256, 64}));
  EXPECT_EQ(h.at("wpe.weight").at("shape"), json::array({64, 64}));
  EXPECT_EQ(h.at("__metadata__").at("remat.L"), "2");
  EXPECT_EQ(h.at("__metadata__").at("remat.C"), "64");
  size_t data_end = 0;
  for (auto& [k, v] : h.items())
    if (k != "__metadata__") data_end = std::max(data_end, v.at("data_offsets").at(1).get<size_t>());
  EXPECT_EQ(8 + n + data_end, bytes.size());

  // Loading it (architecture from the file, no --preset) validates to the loss the run ended on.
  const RunResult load = ok({"train", "--init-from", d / "w.safetensors", "--steps", "0", "--eval-every", "0",
                             "--sample-tokens", "0", "--no-progress"});
  EXPECT_TRUE(has(load.out, "L=2 C=64 NH=4 T=64 V=256")) << load.out;
  std::smatch a, b;
  const std::regex val("val loss ([0-9.]+) -> ([0-9.]+)");
  ASSERT_TRUE(std::regex_search(save.out, a, val)) << save.out;
  ASSERT_TRUE(std::regex_search(load.out, b, val)) << load.out;
  EXPECT_EQ(b[1].str(), a[2].str());
  EXPECT_EQ(b[2].str(), a[2].str());  // no steps: unchanged
  // Explicit flags override the file's architecture (heads are not part of any weight shape).
  const RunResult heads = ok({"train", "--init-from", d / "w.safetensors", "--heads", "2", "--steps", "0",
                              "--eval-every", "0", "--sample-tokens", "0", "--no-progress"});
  EXPECT_TRUE(has(heads.out, "L=2 C=64 NH=2 T=64 V=256")) << heads.out;
  EXPECT_EQ(d.listing(), std::vector<std::string>{"w.safetensors"});
}

// ---- bench ----

TEST(CliCommands, BenchJson) {
  const RunResult r = ok({"bench", "--preset", "tiny", "--recompute", "none", "block", "sqrt", "all", "--timed-steps", "2",
                          "--untimed-steps", "1", "--json"});
  const json rows = json::parse(r.out);
  ASSERT_TRUE(rows.is_array());
  ASSERT_EQ(rows.size(), 4u);
  const std::vector<std::string> names{"none", "block", "sqrt", "all"};
  for (size_t i = 0; i < rows.size(); ++i) {
    const json& j = rows[i];
    SCOPED_TRACE(j.dump());
    EXPECT_EQ(j.at("strategy"), names[i]);
    EXPECT_GT(j.at("peak_activation_bytes").get<size_t>(), 0u);
    EXPECT_EQ(j.at("predicted_activation_bytes").get<size_t>(), j.at("peak_activation_bytes").get<size_t>());
    EXPECT_GT(j.at("forward_equivalents").get<double>(), 2.0);
    const double med = j.at("step_ms_median").get<double>();
    EXPECT_GT(med, 0);
    EXPECT_NEAR(j.at("tokens_per_s").get<double>(), 8.0 * 64.0 / (med / 1e3), 1e-6 * 8.0 * 64.0 / (med / 1e3));
    EXPECT_GT(j.at("overhead_measured").get<double>(), 0);
    if (i == 0) {
      EXPECT_EQ(j.at("overhead_predicted").get<double>(), 1.0);
      EXPECT_EQ(j.at("overhead_measured").get<double>(), 1.0);
    } else {
      EXPECT_GT(j.at("overhead_predicted").get<double>(), 1.0);
      // Checkpointing stores less than `none`.
      EXPECT_LT(j.at("peak_activation_bytes").get<size_t>(), rows[0].at("peak_activation_bytes").get<size_t>());
    }
  }
  EXPECT_GT(rows[1].at("forward_equivalents").get<double>(), rows[0].at("forward_equivalents").get<double>());
}

TEST(CliCommands, BenchTable) {
  const RunResult r = ok({"bench", "--preset", "tiny", "--recompute", "none", "block", "--timed-steps", "1", "--untimed-steps", "0"});
  const auto lines = split_lines(r.out);
  ASSERT_GE(lines.size(), 4u) << r.out;
  EXPECT_EQ(lines[0].rfind("remat bench: gpt2 L=2 C=64 NH=4 T=64 V=256", 0), 0u) << lines[0];
  EXPECT_TRUE(has(lines[1], "strategy") && has(lines[1], "median ms")) << lines[1];
  EXPECT_TRUE(std::regex_search(lines[2], std::regex("^none +0 +[0-9.]+ +[0-9.]+ .* 1\\.000 +1\\.000 "))) << lines[2];
  EXPECT_TRUE(std::regex_search(lines[3], std::regex("^block +2 "))) << lines[3];
}

TEST(CliCommands, BenchProfileShowsWhereTheStepGoes) {
  const RunResult r = ok({"bench", "--preset", "tiny", "--recompute", "none", "block", "--recompute-last", "--timed-steps",
                          "2", "--untimed-steps", "1", "--profile", "--json"});
  const json rows = json::parse(r.out);
  ASSERT_EQ(rows.size(), 2u);
  for (const json& row : rows) {
    SCOPED_TRACE(row.dump());
    const json& prof = row.at("profile");
    ASSERT_TRUE(prof.is_array());
    std::map<std::string, json> by_op;
    double total = 0;
    for (const json& p : prof) {
      by_op[p.at("op").get<std::string>()] = p;
      total += p.at("total_ms").get<double>();
    }
    for (const char* op : {"attn.c_attn [linear]", "attn [attention]", "mlp.gelu [gelu]", "ln_1 [layernorm]",
                           "lm_head [linear_nt]", "loss [cross_entropy]", "emb [embedding]", "optimizer [clip+adamw]"})
      EXPECT_EQ(by_op.count(op), 1u) << op;
    // Per timed step: the tiny preset has 2 blocks, so 2 QKV projections a step.
    EXPECT_EQ(by_op["attn.c_attn [linear]"].at("calls_per_step").get<double>(), 2.0);
    EXPECT_GT(by_op["attn.c_attn [linear]"].at("backward_ms").get<double>(), 0.0);
    // The ops account for the step, give or take the bookkeeping between them.
    EXPECT_LE(total, 1.05 * row.at("step_ms_max").get<double>());
    EXPECT_GT(total, 0.5 * row.at("step_ms_min").get<double>());
  }
  // With --recompute-last, block replays every block once: recompute time only there.
  EXPECT_EQ(rows[0].at("profile")[0].at("recompute_ms").get<double>(), 0.0);
  double rec = 0;
  for (const json& p : rows[1].at("profile")) rec += p.at("recompute_ms").get<double>();
  EXPECT_GT(rec, 0.0);
}

TEST(CliCommands, BenchProfileTable) {
  const RunResult r = ok({"bench", "--preset", "tiny", "--recompute", "none", "--timed-steps", "1", "--untimed-steps", "0",
                          "--profile"});
  EXPECT_TRUE(has(r.out, "op (per step)")) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("\\n  mlp\\.c_fc \\[linear\\] +2 "))) << r.out;
  EXPECT_TRUE(has(r.out, "all ops")) << r.out;
}

// ---- plan ----

// The budget is the whole step. The chosen plan fits it, and is no slower than any textbook strategy
// or frontier plan that fits; the budget binds (store-everything does not fit).
TEST(CliCommands, PlanUnderABudget) {
  const size_t budget = size_t(300) << 20;
  const json j = json::parse(ok({"plan", "--preset", "small", "--step-budget", "300MiB", "--json"}).out);
  const json& plan = j.at("plan");
  const size_t step = plan.at("predicted").at("peak_total_bytes").get<size_t>();
  const double overhead = plan.at("predicted").at("overhead").get<double>();
  EXPECT_LE(step, budget);
  EXPECT_GT(overhead, 1.0);
  EXPECT_GT(j.at("textbook").at(0).at("predicted_step_bytes").get<size_t>(), budget);  // none
  for (const char* list : {"textbook", "frontier"})
    for (const json& row : j.at(list))
      if (row.at("predicted_step_bytes").get<size_t>() <= budget && row.at("attention") == "naive") {
        EXPECT_GE(row.at("overhead_predicted").get<double>(), overhead - 1e-9) << row.dump();
      }
  EXPECT_EQ(j.at("use").get<std::string>().rfind("remat train --preset small --seq 256 --batch 8 --micro-batch 8 ", 0), 0u)
      << j.at("use");
  const RunResult r = ok({"plan", "--preset", "small", "--step-budget", "300MiB"});
  EXPECT_TRUE(has(r.out, "plan for --step-budget 300.00 MiB (whole step): ")) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("\\n  predicted: whole step [0-9.]+ MiB \\(activations alone [0-9.]+ MiB\\), "
                                                  "process [0-9.]+ MiB, overhead [0-9.]+x\\nuse: remat train ")))
      << r.out;
}

}  // namespace

TEST(CliCommands, PlanLlama7bPrintsOneLayerTermByTermBesideKorthikanti) {
  const RunResult r = ok({"plan", "--preset", "llama-7b", "--batch", "1", "--seq", "4096"});
  // The dry run's terms at B=1, T=4096, C=4096, fp32: sbh = 16.8 M elements.
  EXPECT_TRUE(std::regex_search(r.out, std::regex("self_attn\\.probs +\\(1, 32, 4096, 4096\\) +2\\.00 GiB +128\\.000")))
      << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("mlp\\.act +\\(1, 4096, 11008\\) +172\\.00 MiB +10\\.750"))) << r.out;
  EXPECT_TRUE(has(r.out, "sbh(34 + 5as/h) = 194.000 sbh")) << r.out;
  EXPECT_TRUE(has(r.out, "usual figures (LLaMA-7B)")) << r.out;
  EXPECT_TRUE(has(r.out, "the usual 0.5 GB is the fp32 size")) << r.out;
  EXPECT_TRUE(has(r.out, "llama L=32 C=4096 NH=32 KVH=32 H=11008 T=4096 V=32000")) << r.out;
}

TEST(CliCommands, LlamaTrainsUnderEveryStrategyWithExactMemory) {
  for (const char* s : {"none", "block", "sqrt", "all"}) {
    const RunResult r = ok({"train", "--preset", "llama-tiny", "--steps", "1", "--eval-every", "0", "--sample-tokens",
                            "0", "--no-progress", "--recompute", s, "--policy", "selective", "--dropout", "0.1",
                            "--determinism-check"});
    EXPECT_TRUE(has(r.out, "(equal to the byte)")) << s << "\n" << r.out;
    EXPECT_TRUE(has(r.out, "model.layers.0.self_attn.probs")) << r.out;
  }
  const RunResult t = ok({"trace", "--preset", "llama-tiny", "--recompute", "block", "--recompute-last"});
  EXPECT_TRUE(has(t.out, "every block ran twice")) << t.out;
}
