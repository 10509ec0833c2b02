// --precision bf16 (and --fp32-residual) end to end, on tiny GPT-2 and LLaMA models:
//   - every checkpoint strategy and policy, naive and flash, with dropout, gives the loss and every
//     gradient bit-identical to store-everything in bf16, and the measured activation peak equals the
//     planner's simulation of the bf16 dry run, to the byte;
//   - gradient accumulation composes;
//   - activation bytes are at most half of fp32's plus the fp32 statistics, for every strategy;
//   - bf16 is close to fp32 on the same weights and tokens (loss within 1e-2 relative, every
//     parameter's gradient within 5% relative L2 error of fp32's, its norm within 3%);
//   - the determinism check catches a broken replay in bf16 as in fp32;
//   - bf16 learns tinyshakespeare as well as fp32 (val loss within 0.03 nats after 400 steps).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "test_util.h"
#include "checkpoint/policy.h"
#include "core/error.h"
#include "model/model.h"
#include "planner/planner.h"
#include "step/step.h"
#include "train/trainer.h"
#include "learning.h"
#include "strategy_run.h"

using namespace remat;

namespace {

using namespace strategy_test;

enum class Prec { F32, BF16, BF16Fp32Residual };
std::string prec_label(Prec p) {
  return p == Prec::F32 ? "fp32" : p == Prec::BF16 ? "bf16" : "bf16_fp32residual";
}

ModelConfig tiny(Arch arch, int L, float dropout, Prec prec,
                 autograd::AttentionKind att = autograd::AttentionKind::Naive) {
  return strategy_test::tiny(arch, L, dropout, att, prec == Prec::F32 ? DType::F32 : DType::BF16,
                             prec == Prec::BF16Fp32Residual);
}

}  // namespace

class Bf16Strategies : public ::testing::TestWithParam<std::tuple<Arch, Prec>> {};

TEST_P(Bf16Strategies, BitIdenticalToStoreEverythingAndMeasuredExactly) {
  const auto [arch, prec] = GetParam();
  const int L = 5;
  const ModelConfig cfg = tiny(arch, L, 0.1f, prec);
  const Grads ref = run(cfg, "none", false);
  ASSERT_TRUE(std::isfinite(ref.loss));
  const planner::StepTrace tr = trace(cfg);
  // |x| is the residual stream's: bf16, or fp32 with --fp32-residual.
  EXPECT_EQ(tr.boundary_bytes, size_t(2 * cfg.T * cfg.C) * dtype_size(cfg.residual_dtype()));
  for (const char* s : {"none", "all", "block", "sqrt", "uniform:2", "segments:1,4"})
    for (bool last : {false, true})
      for (bool internals : {false, true}) {
        const std::string what = std::string(s) + (last ? " --recompute-last" : "") + (internals ? " replay-internals" : "");
        const Grads r = run(cfg, s, last, 1, nullptr, internals);
        expect_bit_identical(ref, r, what);
        const Schedule sch = make_schedule(parse_strategy(s, L, last, internals), L);
        const planner::MemoryPrediction p = planner::simulate_memory(tr, sch);
        EXPECT_EQ(r.m.peak_activation, p.peak_activation) << what;
        EXPECT_EQ(r.m.peak_checkpoint, p.peak_checkpoint) << what;
        EXPECT_EQ(r.m.peak_recompute, p.peak_recompute) << what;
        EXPECT_EQ(r.m.forward_end, p.forward_end) << what;
      }
}

TEST_P(Bf16Strategies, EveryPolicyNaiveAndFlashIsBitIdentical) {
  const auto [arch, prec] = GetParam();
  const int L = 3;
  for (bool flash : {false, true}) {
    const ModelConfig cfg =
        tiny(arch, L, 0.1f, prec, flash ? autograd::AttentionKind::Flash : autograd::AttentionKind::Naive);
    const auto dry = planner::shape_only_model(cfg);
    const Grads ref = run(cfg, "none", false);
    for (const std::string& pname : dry->policy_names()) {
      const NamePolicy policy = dry->policy(pname);
      const planner::StepTrace tr = trace(cfg, &policy);
      for (const char* s : {"none", "block", "sqrt", "segments:1,2"}) {
        const std::string what = pname + " + " + s + (flash ? " flash" : " naive");
        const Grads r = run(cfg, s, false, 1, &policy);
        expect_bit_identical(ref, r, what);
        const planner::MemoryPrediction p = planner::simulate_memory(tr, make_schedule(parse_strategy(s, L, false), L));
        EXPECT_EQ(r.m.peak_activation, p.peak_activation) << what;
        EXPECT_EQ(r.m.peak_recompute, p.peak_recompute) << what;
      }
    }
  }
}

TEST_P(Bf16Strategies, GradientAccumulationComposes) {
  const auto [arch, prec] = GetParam();
  const ModelConfig cfg = tiny(arch, 4, 0.1f, prec);
  const Grads ref = run(cfg, "none", false, 3);
  for (const char* s : {"all", "block", "sqrt", "segments:1,3"})
    expect_bit_identical(ref, run(cfg, s, false, 3), std::string(s) + " x3 micro-batches");
}

INSTANTIATE_TEST_SUITE_P(Archs, Bf16Strategies,
                         ::testing::Combine(::testing::Values(Arch::GPT2, Arch::Llama),
                                            ::testing::Values(Prec::BF16, Prec::BF16Fp32Residual)),
                         [](const auto& info) {
                           return arch_label(std::get<0>(info.param)) + "_" + prec_label(std::get<1>(info.param));
                         });

class Bf16VsFp32 : public ::testing::TestWithParam<Arch> {};

TEST_P(Bf16VsFp32, ActivationBytesAreHalfPlusTheFp32Statistics) {
  // For every strategy: bf16's activation peak <= fp32's / 2 + the fp32 tensors (norm statistics,
  // log-sum-exp) in bf16's peak, as the allocator splits it by dtype; and those are a small part.
  const int L = 4;
  const ModelConfig c32 = tiny(GetParam(), L, 0.0f, Prec::F32), c16 = tiny(GetParam(), L, 0.0f, Prec::BF16);
  for (const char* s : {"none", "all", "block", "sqrt", "uniform:2"}) {
    const Grads a = run(c32, s, false), b = run(c16, s, false);
    const size_t f32_part = b.m.peak_activation_by_dtype[size_t(DType::F32)];
    const size_t bf16_part = b.m.peak_activation_by_dtype[size_t(DType::BF16)];
    EXPECT_EQ(f32_part + bf16_part, b.m.peak_activation) << s;
    EXPECT_EQ(a.m.peak_activation_by_dtype[size_t(DType::BF16)], 0u) << s;
    EXPECT_LE(double(b.m.peak_activation), 0.5 * double(a.m.peak_activation) + double(f32_part)) << s;
    EXPECT_GT(bf16_part, 0u) << s;
    EXPECT_LT(f32_part * 10, b.m.peak_activation) << s << ": the fp32 statistics are a small part";
  }
}

constexpr double kGradRelL2 = 0.05, kGradNormRatio = 0.03;

TEST_P(Bf16VsFp32, LossAndGradientsAreCloseToFp32) {
  // Same weights (the masters; bf16 rounds its matmul copy), same tokens: the bf16 step's loss within
  // 1e-2 relative of fp32's, every parameter's gradient within kGradRelL2 relative L2 error of fp32's
  // and its norm within kGradNormRatio of fp32's.
  ModelConfig c32 = tiny(GetParam(), 2, 0.0f, Prec::F32);
  c32.C = 64; c32.T = 32; c32.V = 128;
  for (Prec prec : {Prec::BF16, Prec::BF16Fp32Residual}) {
    ModelConfig c16 = c32;
    c16.precision = DType::BF16;
    c16.fp32_residual = prec == Prec::BF16Fp32Residual;
    const Grads a = run(c32, "none", false), b = run(c16, "none", false);
    EXPECT_NEAR(b.loss, a.loss, 1e-2 * std::fabs(a.loss)) << prec_label(prec);
    EXPECT_NE(std::memcmp(&a.loss, &b.loss, sizeof(float)), 0) << "bf16 must actually run in bf16";
    const auto dry = planner::shape_only_model(c32);
    for (size_t i = 0; i < a.g.size(); ++i) {
      double err = 0, na = 0, nb = 0;
      for (size_t j = 0; j < a.g[i].size(); ++j) {
        const double d = double(b.g[i][j]) - double(a.g[i][j]);
        err += d * d;
        na += double(a.g[i][j]) * a.g[i][j];
        nb += double(b.g[i][j]) * b.g[i][j];
      }
      ASSERT_GT(na, 0) << dry->params()[i].name;
      // Direction and size both: a gradient twice too large has relative error 1 and norm ratio 2.
      EXPECT_LT(std::sqrt(err / na), kGradRelL2) << prec_label(prec) << " " << dry->params()[i].name;
      EXPECT_NEAR(std::sqrt(nb / na), 1.0, kGradNormRatio) << prec_label(prec) << " " << dry->params()[i].name;
    }
  }
}

TEST_P(Bf16VsFp32, DeterminismCheckPassesAndCatchesABrokenReplay) {
  const ModelConfig cfg = tiny(GetParam(), 3, 0.1f, Prec::BF16);
  const auto mp = make_model(cfg);
  std::vector<int32_t> in(size_t(2 * cfg.T), 5), tg(in.size(), 7);
  StepOptions so;
  so.schedule = make_schedule(parse_strategy("block", 3, false), 3);
  so.check_determinism = true;
  const MicroBatch mb{in, tg, 2, cfg.T};
  EXPECT_NO_THROW(forward_backward(*mp, mb, double(2 * cfg.T), step_rng(1, 0, 0), so, nullptr));
  so.break_replay = true;
  try {
    forward_backward(*mp, mb, double(2 * cfg.T), step_rng(1, 0, 0), so, nullptr);
    ADD_FAILURE() << "a replay with other dropout masks must be caught";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("determinism"), std::string::npos) << e.what();
  }
}

// The check covers what a selective policy rebuilds in backward too (Saved::get compares each
// rebuild with the forward's tensor; tests/autograd/test_tape.cpp catches a rebuild that differs):
// every rebuild of a real step passes it, fp32 and bf16.
TEST_P(Bf16VsFp32, DeterminismCheckCoversSelectiveRebuilds) {
  for (Prec prec : {Prec::F32, Prec::BF16}) {
    const ModelConfig cfg = tiny(GetParam(), 2, 0.1f, prec);
    const auto mp = make_model(cfg);
    std::vector<int32_t> in(size_t(2 * cfg.T), 5), tg(in.size(), 7);
    for (const std::string& name : mp->policy_names()) {
      if (name == "none") continue;
      SCOPED_TRACE(prec_label(prec) + " " + name);
      StepOptions so;
      so.schedule = make_schedule(parse_strategy("none", 2, false), 2);
      const NamePolicy policy = mp->policy(name);
      so.policy = &policy;
      so.check_determinism = true;
      const MicroBatch mb{in, tg, 2, cfg.T};
      StepMeasure m;
      Allocator::global().reset_peak();
      EXPECT_NO_THROW(forward_backward(*mp, mb, double(2 * cfg.T), step_rng(1, 0, 0), so, &m));
      EXPECT_GT(m.counters.recompute_flops, 0) << "the policy rebuilt something";
      EXPECT_GT(Allocator::global().peak(Category::Debug), 0u) << "the check kept the forward's tensors";
    }
  }
}

TEST_P(Bf16VsFp32, TheMatmulCopyFollowsTheMasters) {
  // The bf16 copy is the master rounded, after init and after every optimizer step; it is a
  // Parameter in the allocator, in bf16.
  const ModelConfig cfg = tiny(GetParam(), 2, 0.0f, Prec::BF16);
  const auto mp = make_model(cfg);
  mp->init(3);
  std::vector<Tensor> m, v;
  make_adamw_moments(*mp, &m, &v);
  int copies = 0;
  for (int round = 0; round < 2; ++round) {
    for (const Param& p : mp->params()) {
      if (!p.lowp.defined()) continue;
      ++copies;
      EXPECT_EQ(p.lowp.dtype(), DType::BF16);
      EXPECT_EQ(p.lowp.category(), Category::Parameter);
      for (int64_t j = 0; j < p.value.numel(); ++j)
        ASSERT_EQ(p.lowp.data_bf16()[j].bits, float_to_bf16(p.value.data()[j]).bits) << p.name << " round " << round;
    }
    std::vector<int32_t> in(size_t(2 * cfg.T), 5), tg(in.size(), 7);
    StepOptions so;
    so.schedule = make_schedule(parse_strategy("none", 2, false), 2);
    mp->zero_grad();
    forward_backward(*mp, MicroBatch{in, tg, 2, cfg.T}, double(2 * cfg.T), step_rng(1, 0, 0), so, nullptr);
    adamw_step(*mp, m, v, AdamWSettings{}, grad_norm(*mp), 1e-2f, 1);
  }
  EXPECT_GT(copies, 0);
}

INSTANTIATE_TEST_SUITE_P(Archs, Bf16VsFp32, ::testing::Values(Arch::GPT2, Arch::Llama),
                         [](const auto& info) { return arch_label(info.param); });

TEST(Bf16Learning, TrainsTinyShakespeareAsWellAsFp32) {
  const std::string path = std::string(REMAT_SHARED_DIR) + "/data/tinyshakespeare.txt";
  if (!std::filesystem::exists(path)) REMAT_SKIP_WITHOUT("needs " << path << " (the ../shared folder is absent)");
  auto train = [&](DType prec) {
    TrainOptions o = learning_test::options(Arch::GPT2, path, 400);  // the learning test's config, 400 steps
    o.model.precision = prec;
    Trainer t(o);
    return t.run();
  };
  const TrainSummary a = train(DType::F32), b = train(DType::BF16);
  std::printf("tinyshakespeare, 400 steps: val loss fp32 %.4f, bf16 %.4f (difference %+.4f nats)\n", a.last_val,
              b.last_val, b.last_val - a.last_val);
  EXPECT_LT(a.last_val, 2.5f);
  EXPECT_NEAR(b.last_val, a.last_val, 0.03) << "fp32 " << a.last_val << ", bf16 " << b.last_val;
}
