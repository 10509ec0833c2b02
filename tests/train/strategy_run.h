// The harness of the strategy tests (test_strategies.cpp in fp32, test_bf16.cpp in bf16): a tiny
// model of either architecture, one optimizer step's gradients under a strategy and policy, and the
// bit-identity check against store-everything.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/policy.h"
#include "model/model.h"
#include "planner/planner.h"
#include "step/step.h"

namespace remat::strategy_test {

struct Grads {
  float loss = 0;
  std::vector<std::vector<float>> g;  // every parameter's gradient, in registration order
  StepMeasure m;
};

inline std::string arch_label(Arch a) { return a == Arch::Llama ? "llama" : "gpt2"; }

// L blocks of C=32, NH=4 (LLaMA: KVH=2, grouped-query), T=16, V=64.
inline ModelConfig tiny(Arch arch, int L, float dropout, autograd::AttentionKind att = autograd::AttentionKind::Naive,
                        DType precision = DType::F32, bool fp32_residual = false) {
  ModelConfig c;
  c.arch = arch;
  c.L = L; c.C = 32; c.NH = 4; c.T = 16; c.V = 64; c.dropout = dropout; c.attention = att;
  if (arch == Arch::Llama) c.KVH = 2;
  c.precision = precision;
  c.fp32_residual = fp32_residual;
  return c;
}

// The planner's view of a config: a dry run of its model at micro-batch 2 (names do not depend on
// the weights).
inline planner::StepTrace trace(const ModelConfig& cfg, const autograd::Policy* policy = nullptr) {
  return planner::trace_step(*planner::shape_only_model(cfg), 2, cfg.T, policy);
}

// One optimizer step's loss and gradients (micro-batch 2, `micro_steps` accumulated), weights from
// `init_seed`, tokens and dropout fixed: only the strategy and policy differ between calls.
inline Grads run(const ModelConfig& cfg, const std::string& strategy, bool recompute_last, int micro_steps = 1,
                 const NamePolicy* policy = nullptr, bool replay_internals = false, uint64_t init_seed = 7) {
  const auto mp = make_model(cfg);
  Model& model = *mp;
  model.init(init_seed);
  const int64_t B = 2, T = cfg.T;
  std::mt19937 gen(3);
  std::vector<int32_t> in(size_t(B * T * micro_steps)), tg(in.size());
  for (auto& t : in) t = int32_t(gen() % cfg.V);
  for (auto& t : tg) t = int32_t(gen() % cfg.V);
  StepOptions so;
  so.schedule = make_schedule(parse_strategy(strategy, int(cfg.L), recompute_last, replay_internals), int(cfg.L));
  so.policy = policy;
  Grads r;
  model.zero_grad();
  for (int k = 0; k < micro_steps; ++k) {
    MicroBatch mb{std::span<const int32_t>(in).subspan(size_t(k * B * T), size_t(B * T)),
                  std::span<const int32_t>(tg).subspan(size_t(k * B * T), size_t(B * T)), B, T};
    r.loss += forward_backward(model, mb, double(B * T * micro_steps), step_rng(11, 5, uint64_t(k)), so, &r.m);
  }
  for (auto& p : model.params()) r.g.emplace_back(p.grad.data(), p.grad.data() + p.grad.numel());
  return r;
}

inline void expect_bit_identical(const Grads& a, const Grads& b, const std::string& what) {
  EXPECT_EQ(std::memcmp(&a.loss, &b.loss, sizeof(float)), 0) << what << ": loss " << a.loss << " vs " << b.loss;
  ASSERT_EQ(a.g.size(), b.g.size());
  for (size_t i = 0; i < a.g.size(); ++i) {
    ASSERT_EQ(a.g[i].size(), b.g[i].size());
    ASSERT_EQ(std::memcmp(a.g[i].data(), b.g[i].data(), a.g[i].size() * sizeof(float)), 0)
        << what << ": gradient of parameter #" << i << " differs";
  }
}

}  // namespace remat::strategy_test
