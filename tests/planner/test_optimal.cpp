// The optimal planner against brute force: on heterogeneous chains of both architectures, with
// policies mixed per block, the DP's plan at every budget is as fast as the fastest of all
// schedules of its family that fit (each priced by simulate_memory and predict_compute, which the
// training tests hold equal to measurement), and it fits. More budget never gives a slower plan,
// and every named strategy is matched or beaten at its own memory. With a calibrated time model
// (planner/calibration.h: a first-pass forward, a replay, a backward of stored or of replayed
// internals each priced apart), the DP equals brute force priced by predict_time, its objective is
// predict_time of the schedule it returns, and it differs from the FLOP-optimal plan.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <set>

#include "core/error.h"
#include "planner/calibration.h"
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

// The same chain with a (policy, attention kernel) pair per candidate: what the planner weighs with
// --attention auto, the kernel chosen per block with the policy.
std::vector<StepTrace> chain_kernels(Arch arch, int L,
                                     const std::vector<std::pair<std::string, autograd::AttentionKind>>& candidates) {
  std::vector<StepTrace> out;
  for (const auto& [pol, kernel] : candidates) {
    StepTrace tr;
    for (int i = 0; i < L; ++i) {
      ModelConfig c = i % 3 == 0 ? small(arch, 2, 64) : i % 3 == 1 ? small(arch, 4, 24) : small(arch, 1, 40);
      c.attention = kernel;
      const auto m = planner::shape_only_model(c);
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

void check_traces_against_brute_force(Arch arch, int L, const std::vector<StepTrace>& traces,
                                      const std::vector<std::string>& policies);

void check_against_brute_force(Arch arch, int L, const std::vector<std::string>& policies) {
  check_traces_against_brute_force(arch, L, chain(arch, L, policies), policies);
}

void check_traces_against_brute_force(Arch arch, int L, const std::vector<StepTrace>& traces,
                                      const std::vector<std::string>& policies) {
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

// A calibration in which a first pass that stores costs more than a checkpoint replayed with its
// internals (the DRAM effect, exaggerated) for "none", and less for the selective policies: the
// fastest plan at any budget is not the FLOP count's. Integer seconds: every sum is exact.
planner::Calibration dram_heavy() {
  planner::Calibration c;
  c.embed_forward = 7;
  c.head_forward = 11;
  c.head_backward = 13;
  c.embed_backward = 5;
  c.rest = 17;
  c.forward_pass = 100;
  c.recompute_pass = 60;
  c.free_checkpoint = 3;
  //            name         fwd store  replay store  bwd stored  bwd replayed
  c.policies = {{"none", 200, 130, 380, 290},
                {"selective", 150, 160, 330, 340},
                {"gelu", 190, 120, 400, 310},
                {"swiglu", 170, 140, 390, 300},
                {"norms", 180, 150, 350, 320}};
  return c;
}

// The DP with `tm` against every schedule of the family priced by schedule_time(tm) (and, given a
// calibration, by predict_time, which must agree to the bit), at every distinct peak of the family.
void check_time_model(const std::vector<StepTrace>& traces, const std::vector<std::string>& policies,
                      const planner::TimeModel& tm, const planner::Calibration* cal, const std::string& what) {
  const int L = int(traces[0].blocks.size());
  std::vector<int> cal_idx;
  if (cal) cal_idx = planner::calibration_indices(*cal, policies);
  auto cal_policy = [&](const std::vector<int>& pol) {
    std::vector<int> out;
    for (int p : pol) out.push_back(cal_idx[size_t(p)]);
    return out;
  };
  std::map<std::vector<int>, StepTrace> spliced;
  std::vector<Priced> all;
  planner::enumerate_family(L, int(traces.size()), [&](const Schedule& s, const std::vector<int>& pol) {
    auto it = spliced.find(pol);
    if (it == spliced.end()) it = spliced.emplace(pol, planner::splice(traces, pol)).first;
    const double t = planner::schedule_time(tm, s, pol);
    if (cal) {
      ASSERT_EQ(t, planner::predict_time(*cal, s, cal_policy(pol)).step) << what;
    }
    all.push_back({planner::simulate_memory(it->second, s).peak_activation, t});
  });
  planner::PlanProblem pp{traces, policies, tm, 0};
  std::set<size_t> peaks;
  for (const Priced& p : all) peaks.insert(p.peak);
  EXPECT_THROW(planner::optimal_plan(pp, *peaks.begin() - 1), Error) << what;
  double last = INFINITY;
  for (size_t budget : peaks) {
    double best = INFINITY;
    for (const Priced& p : all)
      if (p.peak <= budget) best = std::min(best, p.flops);
    const planner::ChainPlan plan = planner::optimal_plan(pp, budget);
    EXPECT_LE(plan.memory.peak_activation, budget) << what;
    EXPECT_EQ(plan.time, best) << what << " at budget " << budget;
    EXPECT_EQ(plan.time, planner::schedule_time(tm, plan.schedule, plan.block_policy)) << what;
    if (cal) {
      EXPECT_EQ(plan.time, planner::predict_time(*cal, plan.schedule, cal_policy(plan.block_policy)).step) << what;
    }
    EXPECT_LE(plan.time, last) << what << ": more budget, slower plan";
    last = plan.time;
  }
}

void check_calibrated(Arch arch, int L, const std::vector<std::string>& policies) {
  const planner::Calibration cal = dram_heavy();
  check_time_model(chain(arch, L, policies), policies, planner::calibrated_time(cal, policies), &cal,
                   std::string(arch == Arch::GPT2 ? "gpt2" : "llama") + " L=" + std::to_string(L) + " policies=" +
                       std::to_string(policies.size()) + " calibrated");
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
// --attention auto: the candidates are (policy, kernel) pairs and the DP picks one per block. Brute
// force prices every schedule over the trace spliced block by block (each block's forwards, first pass
// and replays, its backward and its rebuilds under its own kernel), so a DP that priced a block's
// forwards by another kernel than the one chosen for it would differ here.
TEST(OptimalPlanner, EqualsBruteForceMixedKernels) {
  using autograd::AttentionKind;
  const std::vector<std::pair<std::string, AttentionKind>> gpt = {
      {"none", AttentionKind::Naive}, {"selective", AttentionKind::Naive}, {"none", AttentionKind::Flash}};
  for (int L = 1; L <= 5; ++L)
    check_traces_against_brute_force(Arch::GPT2, L, chain_kernels(Arch::GPT2, L, gpt), {"none", "selective", "flash"});
  const std::vector<std::pair<std::string, AttentionKind>> llama = {
      {"none", AttentionKind::Naive}, {"none", AttentionKind::Flash}, {"swiglu", AttentionKind::Flash}};
  for (int L = 1; L <= 4; ++L)
    check_traces_against_brute_force(Arch::Llama, L, chain_kernels(Arch::Llama, L, llama),
                                      {"none", "flash", "flash+swiglu"});
  // And the mix is a real choice: on these chains some budget's best plan runs both kernels.
  const std::vector<StepTrace> traces = chain_kernels(Arch::GPT2, 4, gpt);
  const planner::PlanProblem pp{traces, {"none", "selective", "flash"}, {}, 0};
  bool mixed = false;
  for (const planner::ChainPlan& p : planner::optimal_frontier(pp)) {
    const bool any_flash = std::count(p.block_policy.begin(), p.block_policy.end(), 2) > 0;
    const bool all_flash = std::count(p.block_policy.begin(), p.block_policy.end(), 2) == 4;
    if (any_flash && !all_flash) mixed = true;
  }
  EXPECT_TRUE(mixed) << "no frontier plan mixes kernels";
}

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

// The calibrated DP (first pass, replay, stored and replayed backwards priced apart) against brute
// force priced by predict_time, on heterogeneous chains of both architectures with mixed policies.
TEST(OptimalPlannerCalibrated, EqualsBruteForceByPredictTime) {
  for (int L = 1; L <= 8; ++L) check_calibrated(Arch::GPT2, L, {"none"});
  for (int L = 1; L <= 5; ++L) check_calibrated(Arch::Llama, L, {"none", "selective"});
  check_calibrated(Arch::GPT2, 6, {"selective", "none"});  // the calibration's order is not the DP's
  check_calibrated(Arch::GPT2, 3, {"none", "selective", "gelu"});
  check_calibrated(Arch::Llama, 3, {"none", "swiglu", "norms"});
}

// Same-shaped blocks take the DP's homogeneous tables (one row per length): the same answers.
TEST(OptimalPlannerCalibrated, HomogeneousChainsEqualBruteForce) {
  const planner::Calibration cal = dram_heavy();
  for (int L = 1; L <= 6; ++L) {
    ModelConfig c = small(Arch::GPT2, 2, 0);
    c.L = L;
    const auto m = planner::shape_only_model(c);
    const NamePolicy sel = m->policy("selective");
    const std::vector<StepTrace> traces{planner::trace_step(*m, 1, 8), planner::trace_step(*m, 1, 8, &sel)};
    check_time_model(traces, {"none", "selective"}, planner::calibrated_time(cal, {"none", "selective"}), &cal,
                     "homogeneous L=" + std::to_string(L));
  }
}

// A time model whose every term differs from block to block (no calibration has that, but the DP
// must take the block's own term): DP equals brute force by schedule_time.
TEST(OptimalPlannerCalibrated, PerBlockCostsEqualBruteForce) {
  planner::TimeModel tm;
  tm.forward_pass = [](int i) { return 10.0 + 3 * i; };
  tm.recompute_pass = [](int i) { return 7.0 + 5 * (i % 2); };
  tm.forward_store = [](int i, int p) { return 30.0 + 4 * i + 9 * p; };
  tm.recompute_store = [](int i, int p) { return 20.0 + 2 * (i % 3) + 5 * p; };
  tm.backward_stored = [](int i, int p) { return 60.0 + i - 11 * p; };
  tm.backward_replayed = [](int i, int p) { return 45.0 + 3 * (i % 2) - 4 * p; };
  tm.free_checkpoint = [](int i) { return 1.0 + i; };
  tm.fixed = 1000;
  for (int L = 1; L <= 6; ++L)
    check_time_model(chain(Arch::Llama, L, {"none", "selective"}), {"none", "selective"}, tm, nullptr,
                     "per-block costs L=" + std::to_string(L));
}

// flop_time, priced action by action, is predict_compute's total: the default objective is the FLOP
// count, fixed terms included.
TEST(OptimalPlannerCalibrated, FlopTimeIsTheFlopCount) {
  const std::vector<StepTrace> traces = chain(Arch::GPT2, 5, {"none", "selective"});
  const planner::TimeModel tm = planner::flop_time(traces);
  planner::enumerate_family(5, 2, [&](const Schedule& s, const std::vector<int>& pol) {
    const double f = total(planner::predict_compute(planner::splice(traces, pol), s));
    ASSERT_NEAR(planner::schedule_time(tm, s, pol), f, 1e-12 * f);
  });
}

// The calibration changes the plan: somewhere, the FLOP-optimal plan is slower by predict_time than
// the calibrated DP's, and the calibrated DP never loses to it.
TEST(OptimalPlannerCalibrated, TimeOptimalDiffersFromFlopOptimal) {
  const planner::Calibration cal = dram_heavy();
  const std::vector<std::string> names{"none", "selective"};
  const std::vector<StepTrace> traces = chain(Arch::GPT2, 6, names);
  const planner::PlanProblem by_flops{traces, names, {}, 0};
  const planner::PlanProblem by_time{traces, names, planner::calibrated_time(cal, names), 0};
  const std::vector<int> idx = planner::calibration_indices(cal, names);
  auto seconds = [&](const planner::ChainPlan& p) {
    std::vector<int> pol;
    for (int q : p.block_policy) pol.push_back(idx[size_t(q)]);
    return planner::predict_time(cal, p.schedule, pol).step;
  };
  int slower = 0;
  for (const planner::ChainPlan& f : planner::optimal_frontier(by_flops)) {
    const planner::ChainPlan t = planner::optimal_plan(by_time, f.memory.peak_activation);
    EXPECT_LE(t.time, seconds(f));
    EXPECT_GE(total(t.compute), total(f.compute) * (1 - 1e-12));  // and the FLOP DP is FLOP-optimal
    slower += seconds(f) > t.time;
  }
  EXPECT_GT(slower, 0) << "the calibration should change some plan";
}
