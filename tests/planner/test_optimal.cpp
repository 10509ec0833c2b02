// The optimal planner against brute force: on heterogeneous chains of both architectures, with
// policies mixed per block, the DP's plan at every budget is as fast as the fastest of all
// schedules of its family that fit (each priced by simulate_memory and predict_compute, which the
// training tests hold equal to measurement), and it fits. More budget never gives a slower plan,
// and every named strategy is matched or beaten at its own memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <set>

#include "core/error.h"
#include "planner/optimal.h"

using namespace remat;
using planner::StepTrace;

namespace {

ModelConfig small(Arch arch, int64_t NH, int64_t hidden) {
  ModelConfig c;
  c.arch = arch;
  c.L = 1; c.C = 16; c.NH = NH; c.T = 8; c.V = 32; c.hidden = hidden; c.dropout = 0.1f;
  if (arch == Arch::Llama) c.KVH = NH / 2 > 0 ? NH / 2 : 1;
  return c;
}

// A heterogeneous chain of L blocks under each of `policies`: block i comes from the i % 3-th of
// three configs of `arch` that differ in heads and MLP width (same width C, so the same |x|).
std::vector<StepTrace> chain(Arch arch, int L, const std::vector<std::string>& policies) {
  const ModelConfig variants[3] = {small(arch, 2, 64), small(arch, 4, 24), small(arch, 1, 40)};
  std::vector<StepTrace> out;
  for (const std::string& pol : policies) {
    StepTrace tr;
    for (int i = 0; i < L; ++i) {
      const auto m = planner::shape_only_model(variants[i % 3]);
      const NamePolicy p = m->policy(pol);
      StepTrace one = planner::trace_step(*m, 1, 8, p.keeps_all() ? nullptr : &p);
      if (i == 0) tr = one;
      else tr.blocks.push_back(one.blocks[0]);
    }
    out.push_back(std::move(tr));
  }
  return out;
}

struct Priced {
  size_t peak;
  double flops;
};

// Every schedule of the family, priced.
std::vector<Priced> brute_force(const std::vector<StepTrace>& traces) {
  const int L = int(traces[0].blocks.size());
  std::map<std::vector<int>, StepTrace> spliced;
  std::vector<Priced> all;
  planner::enumerate_family(L, int(traces.size()), [&](const Schedule& s, const std::vector<int>& pol) {
    auto it = spliced.find(pol);
    if (it == spliced.end()) it = spliced.emplace(pol, planner::splice(traces, pol)).first;
    const planner::ComputePrediction c = planner::predict_compute(it->second, s);
    all.push_back({planner::simulate_memory(it->second, s).peak_activation, c.fwd + c.bwd + c.recompute});
  });
  return all;
}

double total(const planner::ComputePrediction& c) { return c.fwd + c.bwd + c.recompute; }

void check_against_brute_force(Arch arch, int L, const std::vector<std::string>& policies) {
  const std::vector<StepTrace> traces = chain(arch, L, policies);
  const std::vector<Priced> all = brute_force(traces);
  ASSERT_GT(all.size(), size_t(L));
  planner::PlanProblem pp{traces, policies, {}, 0};
  // The budgets: every distinct peak of the family (the exact edges), thinned to at most 60, and a
  // byte below the smallest.
  std::set<size_t> peaks;
  for (const Priced& p : all) peaks.insert(p.peak);
  std::vector<size_t> budgets(peaks.begin(), peaks.end());
  if (budgets.size() > 60) {
    std::vector<size_t> thin;
    for (size_t k = 0; k < 60; ++k) thin.push_back(budgets[k * (budgets.size() - 1) / 59]);
    budgets = thin;
  }
  const std::string what = std::string(arch == Arch::GPT2 ? "gpt2" : "llama") + " L=" + std::to_string(L) +
                           " policies=" + std::to_string(policies.size()) + " (" + std::to_string(all.size()) +
                           " schedules)";
  EXPECT_THROW(planner::optimal_plan(pp, *peaks.begin() - 1), Error) << what;
  double last = INFINITY;
  for (size_t budget : budgets) {
    double best = INFINITY;
    for (const Priced& p : all)
      if (p.peak <= budget) best = std::min(best, p.flops);
    const planner::ChainPlan plan = planner::optimal_plan(pp, budget);
    EXPECT_EQ(plan.slot_bytes % 4, 0u);
    EXPECT_LE(plan.memory.peak_activation, budget) << what;
    EXPECT_NEAR(total(plan.compute), best, 1e-9 * best) << what << " at budget " << budget;
    EXPECT_LE(total(plan.compute), last * (1 + 1e-12)) << what << ": more budget, slower plan";
    last = total(plan.compute);
  }
  const planner::ChainPlan least = planner::least_memory_plan(pp);
  EXPECT_EQ(least.memory.peak_activation, *peaks.begin()) << what;
}

}  // namespace

TEST(OptimalPlanner, EqualsBruteForceGpt2OnePolicy) {
  for (int L = 1; L <= 8; ++L) check_against_brute_force(Arch::GPT2, L, {"none"});
}
TEST(OptimalPlanner, EqualsBruteForceLlamaOnePolicy) {
  for (int L = 1; L <= 8; ++L) check_against_brute_force(Arch::Llama, L, {"none"});
}
TEST(OptimalPlanner, EqualsBruteForceMixedPoliciesGpt2) {
  for (int L = 1; L <= 6; ++L) check_against_brute_force(Arch::GPT2, L, {"none", "selective"});
  check_against_brute_force(Arch::GPT2, 3, {"none", "selective", "gelu"});
}
TEST(OptimalPlanner, EqualsBruteForceMixedPoliciesLlama) {
  for (int L = 1; L <= 6; ++L) check_against_brute_force(Arch::Llama, L, {"none", "selective"});
  check_against_brute_force(Arch::Llama, 3, {"none", "swiglu", "norms"});
}

// Every named strategy, in either replay mode and with or without the last segment recomputed, is
// one schedule of the family: at its own predicted peak the DP is at least as fast.
TEST(OptimalPlanner, NeverSlowerThanANamedStrategy) {
  for (Arch arch : {Arch::GPT2, Arch::Llama}) {
    ModelConfig c = small(arch, 2, 0);
    c.L = 9;
    const auto m = planner::shape_only_model(c);
    const NamePolicy sel = m->policy("selective");
    std::vector<StepTrace> traces{planner::trace_step(*m, 2, 8), planner::trace_step(*m, 2, 8, &sel)};
    planner::PlanProblem pp{traces, {"none", "selective"}, {}, 0};
    int strictly = 0;
    for (int p = 0; p < 2; ++p)
      for (const char* s : {"none", "all", "block", "sqrt", "uniform:2", "uniform:4", "segments:2,3,4"})
        for (bool last : {false, true})
          for (bool internals : {false, true}) {
            const Schedule sch = make_schedule(parse_strategy(s, 9, last, internals), 9);
            const size_t peak = planner::simulate_memory(traces[size_t(p)], sch).peak_activation;
            const double flops = total(planner::predict_compute(traces[size_t(p)], sch));
            const planner::ChainPlan plan = planner::optimal_plan(pp, peak);
            EXPECT_LE(plan.memory.peak_activation, peak) << s;
            EXPECT_LE(total(plan.compute), flops * (1 + 1e-12)) << s << " last=" << last << " internals=" << internals;
            strictly += total(plan.compute) < flops * (1 - 1e-9);
          }
    EXPECT_GT(strictly, 0) << "the DP should beat some textbook schedule at its own memory";
  }
}

TEST(OptimalPlanner, FrontierIsParetoAndItsPlansAreOptimal) {
  const std::vector<StepTrace> traces = chain(Arch::GPT2, 6, {"none", "selective"});
  planner::PlanProblem pp{traces, {"none", "selective"}, {}, 0};
  const std::vector<planner::ChainPlan> f = planner::optimal_frontier(pp);
  ASSERT_GE(f.size(), 3u);
  for (size_t k = 1; k < f.size(); ++k) {
    EXPECT_GT(f[k].memory.peak_activation, f[k - 1].memory.peak_activation);
    EXPECT_LT(total(f[k].compute), total(f[k - 1].compute));
  }
  for (const planner::ChainPlan& p : f)
    EXPECT_NEAR(total(planner::optimal_plan(pp, p.memory.peak_activation).compute), total(p.compute),
                1e-9 * total(p.compute));
}

// Large chains plan with a coarser memory resolution, still within the budget.
TEST(OptimalPlanner, LongChainsStayFeasibleAndFast) {
  ModelConfig c = small(Arch::GPT2, 2, 0);
  c.L = 400;
  const auto m = planner::shape_only_model(c);
  const NamePolicy sel = m->policy("selective");
  std::vector<StepTrace> traces{planner::trace_step(*m, 2, 8), planner::trace_step(*m, 2, 8, &sel)};
  planner::PlanProblem pp{traces, {"none", "selective"}, {}, 0};
  const size_t none = planner::simulate_memory(traces[0], make_schedule(parse_strategy("none", 400, false), 400)).peak_activation;
  const size_t sqrt = planner::simulate_memory(traces[0], make_schedule(parse_strategy("sqrt", 400, false), 400)).peak_activation;
  const double sqrt_flops = total(planner::predict_compute(traces[0], make_schedule(parse_strategy("sqrt", 400, false), 400)));
  const planner::ChainPlan p = planner::optimal_plan(pp, sqrt);
  EXPECT_LE(p.memory.peak_activation, sqrt);
  EXPECT_LE(total(p.compute), sqrt_flops * 1.001);
  const planner::ChainPlan q = planner::optimal_plan(pp, none);
  EXPECT_EQ(q.compute.recompute, 0.0);
}

// A coarse memory resolution (forced here) only ever costs speed, never the budget, and never
// loses to a textbook schedule.
TEST(OptimalPlanner, CoarseSlotsStayWithinBudget) {
  const std::vector<StepTrace> traces = chain(Arch::Llama, 7, {"none", "selective"});
  planner::PlanProblem exact{traces, {"none", "selective"}, {}, 0};
  planner::PlanProblem coarse{traces, {"none", "selective"}, {}, 12};
  const std::vector<Priced> all = brute_force(std::vector<StepTrace>{traces[0]});
  std::set<size_t> peaks;
  for (const Priced& p : all) peaks.insert(p.peak);
  for (size_t budget : peaks) {
    const planner::ChainPlan e = planner::optimal_plan(exact, budget);
    const planner::ChainPlan c = planner::optimal_plan(coarse, budget);
    EXPECT_GT(c.slot_bytes, e.slot_bytes);
    EXPECT_LE(c.memory.peak_activation, budget);
    EXPECT_GE(total(c.compute), total(e.compute) * (1 - 1e-12));
  }
}
