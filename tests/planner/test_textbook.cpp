// Beating the textbook (issue #9, "What it must show"): at GPT-2-small (preset gpt2, L=12, C=768,
// T=1024), at the predicted activation peak of sqrt, of uniform:K for several K and of block, the
// optimal planner's plan (a policy per block among the model's presets) fits that memory, is never
// slower (predicted FLOPs), and is strictly faster at some of them. Shape-only dry runs: cheap.
#include <gtest/gtest.h>

#include <cstdio>

#include "planner/optimal.h"

using namespace remat;

namespace {

double total(const planner::ComputePrediction& c) { return c.fwd + c.bwd + c.recompute; }

TEST(Textbook, OptimalPlanBeatsSqrtUniformAndBlockAtTheirMemoryOnGpt2Small) {
  ModelConfig cfg = preset("gpt2");
  const int L = int(cfg.L);
  ASSERT_EQ(L, 12);
  ASSERT_EQ(cfg.T, 1024);
  const int64_t B = 1, T = 1024;
  const auto m = planner::shape_only_model(cfg);
  planner::PlanProblem pp;
  pp.policy_names = m->policy_names();
  for (const std::string& name : pp.policy_names) {
    const NamePolicy p = m->policy(name);
    pp.traces.push_back(planner::trace_step(*m, B, T, p.keeps_all() ? nullptr : &p));
  }
  const double base = total(planner::predict_compute(pp.traces[0], make_schedule(parse_strategy("none", L, false), L)));
  int strictly = 0;
  std::printf("gpt2 (L=12 C=768 T=1024), micro-batch 1: strategy, its activation peak, its overhead, the plan's\n");
  for (const char* s : {"sqrt", "uniform:2", "uniform:3", "uniform:6", "block"}) {
    SCOPED_TRACE(s);
    const Schedule sch = make_schedule(parse_strategy(s, L, false), L);
    const size_t peak = planner::simulate_memory(pp.traces[0], sch).peak_activation;
    const double flops = total(planner::predict_compute(pp.traces[0], sch));
    const planner::ChainPlan plan = planner::optimal_plan(pp, peak);
    EXPECT_LE(plan.memory.peak_activation, peak);
    EXPECT_LE(total(plan.compute), flops * (1 + 1e-12));
    strictly += total(plan.compute) < flops * (1 - 1e-6);
    std::printf("  %-10s %10.2f MiB  %.4fx   optimal %10.2f MiB  %.4fx  (%s)\n", s, double(peak) / 1048576.0,
                flops / base, double(plan.memory.peak_activation) / 1048576.0, total(plan.compute) / base,
                plan.summary().c_str());
  }
  EXPECT_GT(strictly, 0) << "the planner should be strictly faster than some textbook strategy at its memory";
}

}  // namespace
