// Every checkpoint strategy against store-everything on a tiny GPT-2 and a tiny LLaMA: loss and
// every gradient bit-identical in fp32 (dropout 0 and 0.1), block-forward counts equal to the
// schedule's formula, and the measured peak activation bytes equal to the planner's simulation of
// the dry run, to the byte.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstring>
#include <random>

#include "checkpoint/policy.h"
#include "planner/planner.h"
#include "planner/pricing.h"
#include "core/error.h"
#include "step/step.h"
#include "strategy_run.h"
#include "model/model.h"

using namespace remat;

namespace {

using namespace strategy_test;

const char* kStrategies[] = {"none", "all", "block", "sqrt", "uniform:2", "segments:1,L-1"};

std::string resolve(const std::string& s, int L) {
  if (s == "segments:1,L-1") return L > 1 ? "segments:1," + std::to_string(L - 1) : "segments:1";
  if (s == "uniform:2" && L < 2) return "uniform:1";
  return s;
}

}  // namespace

class Strategies : public ::testing::TestWithParam<std::tuple<Arch, int, float>> {};

TEST_P(Strategies, BitIdenticalCountedAndMeasuredExactly) {
  const auto [arch, L, dropout] = GetParam();
  const ModelConfig cfg = tiny(arch, L, dropout);
  const Grads ref = run(cfg, "none", false);
  EXPECT_TRUE(std::isfinite(ref.loss));
  const planner::StepTrace tr = trace(cfg);
  const size_t x = size_t(2 * cfg.T * cfg.C) * 4;  // |x|
  ASSERT_EQ(tr.boundary_bytes, x);
  const size_t block = tr.blocks[0].kept_bytes(), head = tr.head.kept_bytes();
  for (const char* s0 : kStrategies) {
    const std::string s = resolve(s0, L);
    for (bool last : {false, true})
      for (bool internals : {false, true}) {
        const std::string what = s + (last ? " --recompute-last" : "") + (internals ? " replay-internals" : "") +
                                 " L=" + std::to_string(L);
        const Grads r = run(cfg, s, last, 1, nullptr, internals);
        expect_bit_identical(ref, r, what);
        // Counts: as the schedule says, and as the closed forms say.
        const StrategySpec spec = parse_strategy(s, L, last, internals);
        const Schedule sch = make_schedule(spec, L);
        const ScheduleCounts c = count(sch);
        EXPECT_EQ(r.m.counters.block_forwards, c.forwards) << what;
        EXPECT_EQ(r.m.counters.block_recomputes, c.recomputes) << what;
        EXPECT_EQ(r.m.counters.block_backwards, L) << what;
        EXPECT_EQ(c.forwards, L) << what;
        if (s == "none") { EXPECT_EQ(c.recomputes, 0); }
        if (s == "block") { EXPECT_EQ(c.recomputes, last ? L : L - 1) << what; }  // every block twice
        if (s == "all") { EXPECT_EQ(c.recomputes, last ? L * (L + 1) / 2 : L * (L - 1) / 2) << what; }
        if (!spec.segments.empty()) {
          // A replayed segment of n blocks: n replays keeping internals, or 2n - 1 keeping inputs.
          int want = 0;
          const size_t K = spec.segments.size();
          for (size_t k = 0; k + (last ? 0 : 1) < K; ++k) want += internals ? spec.segments[k] : 2 * spec.segments[k] - 1;
          EXPECT_EQ(c.recomputes, want) << what;
        }
        // Memory: the measured peak equals the simulation of the same schedule over the table.
        const planner::MemoryPrediction p = planner::simulate_memory(tr, sch);
        EXPECT_EQ(r.m.peak_activation, p.peak_activation) << what;
        EXPECT_EQ(r.m.peak_checkpoint, p.peak_checkpoint) << what;
        EXPECT_EQ(r.m.peak_recompute, p.peak_recompute) << what;
        EXPECT_EQ(r.m.peak_saved, p.peak_saved) << what;
        EXPECT_EQ(r.m.forward_end, p.forward_end) << what;
        // ... and the closed form, textbook count with inputs kept on replay: after the forward
        // K|x| + head; replaying segment k (0-based) with L_k >= 2 blocks holds k + 1 checkpoints,
        // L_k - 2 replayed inputs and one block's internals: within K|x| + max L_k|x| + internals.
        if (last && !internals && !spec.segments.empty()) {
          const size_t K = spec.segments.size();
          size_t want = K * x + head, bound_max = 0;
          for (size_t k = 0; k < K; ++k) {
            const size_t n = size_t(spec.segments[k]);
            want = std::max(want, n >= 2 ? (k + n - 1) * x + block : k * x + block);
            bound_max = std::max(bound_max, n);
          }
          EXPECT_EQ(r.m.peak_activation, want) << what;
          EXPECT_LE(r.m.peak_activation, std::max(K * x + bound_max * x + block, K * x + head)) << what;
        }
        // FLOPs: the counted equal the predicted.
        const planner::ComputePrediction cp = planner::predict_compute(tr, sch);
        EXPECT_NEAR(r.m.counters.recompute_flops, cp.recompute, 1e-6 * cp.recompute + 1) << what;
        EXPECT_NEAR(r.m.counters.fwd_flops, cp.fwd, 1e-6 * cp.fwd) << what;
        EXPECT_NEAR(r.m.counters.bwd_flops, cp.bwd, 1e-6 * cp.bwd) << what;
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Depths, Strategies,
                         ::testing::Combine(::testing::Values(Arch::GPT2, Arch::Llama), ::testing::Values(1, 2, 3, 5, 12),
                                            ::testing::Values(0.0f, 0.1f)),
                         [](const auto& info) {
                           return arch_label(std::get<0>(info.param)) + "_L" + std::to_string(std::get<1>(info.param)) +
                                  (std::get<2>(info.param) > 0 ? "_dropout" : "");
                         });

class Accumulation : public ::testing::TestWithParam<Arch> {};

TEST_P(Accumulation, GradientAccumulationComposes) {
  // With K micro-batches every strategy matches none with the same micro-batching, and the
  // activation peak is that of one micro-batch.
  const ModelConfig cfg = tiny(GetParam(), 4, 0.1f);
  const Grads ref = run(cfg, "none", false, 3);
  const Grads one = run(cfg, "none", false, 1);
  EXPECT_EQ(ref.m.peak_activation, one.m.peak_activation);
  for (const char* s : {"all", "block", "sqrt", "uniform:3", "segments:1,3"}) {
    const Grads r = run(cfg, s, false, 3);
    expect_bit_identical(ref, r, std::string(s) + " x3 micro-batches");
    EXPECT_EQ(r.m.peak_activation, run(cfg, s, false, 1).m.peak_activation) << s;
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, Accumulation, ::testing::Values(Arch::GPT2, Arch::Llama),
                         [](const auto& info) { return arch_label(info.param); });

// Every policy preset of each model, alone and with every segment strategy, naive and flash
// attention: gradients bit-identical to store-everything with the same kernel; memory and FLOPs as
// the planner says.
class Policies : public ::testing::TestWithParam<std::tuple<Arch, int, bool, float>> {};

TEST_P(Policies, BitIdenticalAndMeasuredExactlyWithEveryStrategy) {
  const auto [arch, preset, flash, dropout] = GetParam();
  const int L = 3;
  const ModelConfig cfg = tiny(arch, L, dropout, flash ? autograd::AttentionKind::Flash : autograd::AttentionKind::Naive);
  const auto dry = planner::shape_only_model(cfg);
  const std::vector<std::string> names = dry->policy_names();
  ASSERT_EQ(names.size(), 4u) << "none and three presets";
  const std::string pname = names[size_t(preset)];
  const NamePolicy policy = dry->policy(pname);
  const planner::StepTrace tr = trace(cfg, &policy), tr_all = trace(cfg);
  const Grads ref = run(cfg, "none", false);
  for (const char* s : {"none", "all", "block", "sqrt", "uniform:2", "segments:1,2"}) {
    const std::string what = pname + " + " + s + (flash ? " flash" : " naive");
    const Grads r = run(cfg, s, false, 1, &policy);
    expect_bit_identical(ref, r, what);
    const Schedule sch = make_schedule(parse_strategy(s, L, false), L);
    const planner::MemoryPrediction p = planner::simulate_memory(tr, sch);
    EXPECT_EQ(r.m.peak_activation, p.peak_activation) << what;
    EXPECT_EQ(r.m.peak_recompute, p.peak_recompute) << what;
    EXPECT_EQ(r.m.peak_saved, p.peak_saved) << what;
    const planner::ComputePrediction cp = planner::predict_compute(tr, sch);
    EXPECT_NEAR(r.m.counters.recompute_flops, cp.recompute, 1e-6 * cp.recompute + 1) << what;
  }
  // Alone (with `none`), a policy that drops something saves memory, and the B*NH*T^2 term goes.
  const Schedule none = make_schedule(parse_strategy("none", L, false), L);
  const size_t base = planner::simulate_memory(tr_all, none).peak_activation;
  const size_t with = planner::simulate_memory(tr, none).peak_activation;
  if (pname == "none" || (pname == "selective" && flash)) EXPECT_EQ(with, base) << "nothing to drop";
  else EXPECT_LT(with, base) << pname;
  if (pname == "selective" && !flash) {
    const auto& t = tr.blocks[0];
    ASSERT_EQ(t.dropped.size(), 1u);
    EXPECT_EQ(t.dropped[0].name, dry->layer_prefix(0) + (arch == Arch::Llama ? "self_attn.probs" : "attn.probs"));
    EXPECT_EQ(t.dropped[0].bytes, size_t(2 * cfg.NH * cfg.T * cfg.T) * 4);
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, Policies,
                         ::testing::Combine(::testing::Values(Arch::GPT2, Arch::Llama), ::testing::Values(0, 1, 2, 3),
                                            ::testing::Bool(), ::testing::Values(0.0f, 0.1f)),
                         [](const auto& info) {
                           return arch_label(std::get<0>(info.param)) + "_preset" +
                                  std::to_string(std::get<1>(info.param)) + (std::get<2>(info.param) ? "_flash" : "_naive") +
                                  (std::get<3>(info.param) > 0 ? "_dropout" : "");
                         });

struct StrictCase {
  Arch arch;
  std::string bad, bad_full;                 // a tensor nothing rebuilds
  std::vector<std::string> only, dropped;  // save-only names, and what it then drops in block 1
};

void PrintTo(const StrictCase& c, std::ostream* os) { *os << (c.arch == Arch::Llama ? "llama" : "gpt2"); }

class StrictPolicies : public ::testing::TestWithParam<StrictCase> {};

TEST_P(StrictPolicies, RefuseWhatNothingCanRebuildAndSaveOnlyDropsTheRest) {
  const StrictCase& c = GetParam();
  const ModelConfig cfg = tiny(c.arch, 2, 0);
  const auto dry = planner::shape_only_model(cfg);
  const NamePolicy bad = dry->named_policy(NamePolicy::Mode::SaveAllBut, {c.bad}, "bad");
  try {
    run(cfg, "none", false, 1, &bad);
    FAIL() << "dropping " << c.bad << " must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot drop '" + c.bad_full + "'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(trace(cfg, &bad), Error) << "the dry run refuses it as the runtime does";
  // save-only keeps the listed names and whatever nothing can rebuild: here it drops the rest.
  const NamePolicy only = dry->named_policy(NamePolicy::Mode::SaveOnly, c.only, "only");
  std::vector<std::string> dropped;
  const planner::StepTrace tr = trace(cfg, &only);
  for (auto& d : tr.blocks[1].dropped) dropped.push_back(d.name);
  EXPECT_EQ(dropped, c.dropped);
  expect_bit_identical(run(cfg, "none", false), run(cfg, "block", false, 1, &only), "save-only + block");
}

INSTANTIATE_TEST_SUITE_P(
    Archs, StrictPolicies,
    ::testing::Values(StrictCase{Arch::GPT2, "mlp.c_fc", "h.0.mlp.c_fc", {"attn.c_attn", "mlp.c_fc"},
                                 {"h.1.ln_1", "h.1.attn.probs", "h.1.ln_2", "h.1.mlp.gelu"}},
                      StrictCase{Arch::Llama, "mlp.gate_proj", "model.layers.0.mlp.gate_proj",
                                 {"self_attn.qkv", "mlp.gate_proj", "mlp.up_proj"},
                                 {"model.layers.1.input_layernorm", "model.layers.1.self_attn.probs",
                                  "model.layers.1.post_attention_layernorm", "model.layers.1.mlp.act"}}),
    [](const auto& info) { return arch_label(info.param.arch); });
