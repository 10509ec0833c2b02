// Plans of the optimal planner, run: every plan on the frontier of a tiny GPT-2 and a tiny LLaMA
// (a policy per block, checkpoints, nested replays) trains bit-identically to store-everything with
// dropout on, passes the determinism check, and its measured peak activation bytes equal the
// planner's prediction to the byte.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <set>

#include "planner/optimal.h"
#include "step/step.h"

using namespace remat;

namespace {

struct Result {
  float loss = 0;
  std::vector<std::vector<float>> g;
  StepMeasure m;
};

Result run(Model& model, const ModelConfig& cfg, const Schedule& sch, const std::vector<const autograd::Policy*>& pol,
           bool check) {
  const int64_t B = 2, T = cfg.T;
  std::mt19937 gen(5);
  std::vector<int32_t> in(size_t(B * T)), tg(in.size());
  for (auto& t : in) t = int32_t(gen() % cfg.V);
  for (auto& t : tg) t = int32_t(gen() % cfg.V);
  StepOptions so;
  so.schedule = sch;
  so.block_policy = pol;
  so.check_determinism = check;
  model.zero_grad();
  Result r;
  MicroBatch mb{in, tg, B, T};
  r.loss = forward_backward(model, mb, double(B * T), step_rng(3, 1, 0), so, &r.m);
  for (auto& p : model.params()) r.g.emplace_back(p.grad.data(), p.grad.data() + p.grad.numel());
  return r;
}

void check_arch(Arch arch) {
  ModelConfig cfg;
  cfg.arch = arch;
  cfg.L = 5; cfg.C = 32; cfg.NH = 4; cfg.T = 16; cfg.V = 64; cfg.dropout = 0.1f;
  if (arch == Arch::Llama) cfg.KVH = 2;
  const auto model = make_model(cfg);
  model->init(9);
  const std::vector<std::string> names = {"none", "selective", arch == Arch::GPT2 ? "gelu" : "swiglu"};
  std::vector<NamePolicy> policies;
  std::vector<planner::StepTrace> traces;
  for (const std::string& n : names) policies.push_back(model->policy(n));
  for (const NamePolicy& p : policies) traces.push_back(planner::trace_step(*model, 2, cfg.T, p.keeps_all() ? nullptr : &p));
  const planner::PlanProblem pp{traces, names, {}, 0};
  std::vector<planner::ChainPlan> plans = planner::optimal_frontier(pp);
  ASSERT_GE(plans.size(), 6u);
  std::printf("%zu frontier plans\n", plans.size());
  // ... and plans for budgets between the frontier's points.
  for (size_t k = 1; k < plans.size() && k < 8; ++k)
    plans.push_back(planner::optimal_plan(pp, (plans[k - 1].memory.peak_activation + plans[k].memory.peak_activation) / 2));

  const Schedule none = make_schedule(parse_strategy("none", int(cfg.L), false), int(cfg.L));
  const Result ref = run(*model, cfg, none, {}, false);
  int mixed = 0;
  for (const planner::ChainPlan& plan : plans) {
    std::vector<const autograd::Policy*> pol;
    for (int p : plan.block_policy) pol.push_back(policies[size_t(p)].keeps_all() ? nullptr : &policies[size_t(p)]);
    mixed += std::set<int>(plan.block_policy.begin(), plan.block_policy.end()).size() > 1;
    const Result r = run(*model, cfg, plan.schedule, pol, true);
    const std::string what = plan.summary();
    EXPECT_EQ(std::memcmp(&r.loss, &ref.loss, sizeof(float)), 0) << what;
    for (size_t i = 0; i < ref.g.size(); ++i)
      ASSERT_EQ(std::memcmp(r.g[i].data(), ref.g[i].data(), ref.g[i].size() * sizeof(float)), 0)
          << what << ": gradient #" << i << " differs";
    EXPECT_EQ(r.m.peak_activation, plan.memory.peak_activation) << what;
    EXPECT_EQ(r.m.forward_end, plan.memory.forward_end) << what;
    const ScheduleCounts c = count(plan.schedule);
    EXPECT_EQ(r.m.counters.block_recomputes, c.recomputes) << what;
  }
  EXPECT_GT(mixed, 0) << "some plan should mix policies across blocks";
}

}  // namespace

TEST(Plans, FrontierPlansRunExactlyGpt2) { check_arch(Arch::GPT2); }
TEST(Plans, FrontierPlansRunExactlyLlama) { check_arch(Arch::Llama); }
