// The DP planning for the whole step (PlanProblem::step) against brute force on heterogeneous chains
// up to L=6: blocks of three shapes (heads, MLP width), policies per block, and bytes above the
// activation level that differ per block, candidate and context (as planner/whole_step.h measures
// them; here made up, so that no regularity of a real model hides a fault). The reference prices every
// schedule of the family by its own walk of the executor's state. At 200+ budgets over the whole range
// and a byte either side of every frontier point: the DP's plan is as fast as the fastest that fits,
// fits, and a larger budget never gives a slower plan.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include "planner/optimal.h"

using namespace remat;
using planner::StepTrace;

namespace {

ModelConfig small(Arch arch, int64_t NH, int64_t hidden) {
  ModelConfig c;
  c.arch = arch;
  c.L = 1; c.C = 16; c.NH = NH; c.T = 8; c.V = 32; c.hidden = hidden;
  if (arch == Arch::Llama) c.KVH = NH / 2 > 0 ? NH / 2 : 1;
  return c;
}

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

constexpr size_t kPersistent = 1 << 20;

// Made-up bytes above the level: any function of the action's key. A forward that records nothing
// holds the same under every candidate (a policy acts on what is saved), and a backward holds at
// least what it rebuilds above the level (measured bytes include that rise; 8 KiB is above any here).
size_t made_up(const Action& a, int p, bool in, bool cur, bool bnd) {
  const int pp = a.kind == Action::Kind::Forward && a.keep != Keep::Internals ? 0 : p;
  uint64_t h = uint64_t(a.block) * 1000003u + uint64_t(pp) * 7919u + uint64_t(a.kind) * 131u +
               uint64_t(a.keep) * 31u + uint64_t(a.recompute) * 17u + uint64_t(in) * 5u + uint64_t(cur) * 3u + bnd;
  h ^= h >> 13, h *= 0x9E3779B97F4A7C15ull, h ^= h >> 29;
  return kPersistent + 64 * (h % 97) + (a.kind == Action::Kind::Backward ? 8192 : 0);
}

// The reference: the executor's state walked action by action (which block output is current, which
// inputs are checkpoints, which block recorded on one), independently of the planner's code.
size_t whole_step(const StepTrace& tr, const Schedule& s, const std::vector<int>& pol, size_t outside, size_t head) {
  planner::ActionLevels lv;
  planner::simulate_memory(tr, s, &lv);
  const int L = int(tr.blocks.size());
  std::vector<bool> boundary(L, false), on_boundary(L, false);
  size_t f = 0;
  while (f < s.size() && s[f].kind == Action::Kind::Forward && !s[f].recompute) ++f;
  size_t peak = std::max(outside, lv.before_head + head);
  int cur = 0;
  for (size_t k = 0; k < s.size(); ++k) {
    const Action& a = s[k];
    if (k == f) cur = -1;
    size_t w = 0;
    if (a.kind == Action::Kind::Forward) {
      w = made_up(a, pol[a.block], cur != a.block, cur >= 0, boundary[a.block]);
      if (a.keep == Keep::Boundary) boundary[a.block] = true;
      if (a.keep == Keep::Internals) on_boundary[a.block] = boundary[a.block];
      cur = a.block + 1;
    } else if (a.kind == Action::Kind::Backward) {
      w = made_up(a, pol[a.block], on_boundary[a.block], cur >= 0, boundary[a.block]);
      cur = -1;
    } else {
      w = made_up(a, pol[a.block], false, cur >= 0, true);
      boundary[a.block] = false;
    }
    peak = std::max(peak, lv.before[k] + w);
  }
  return peak;
}

void check(Arch arch, int L, const std::vector<std::string>& policies) {
  planner::PlanProblem pp{chain(arch, L, policies), policies, {}, 0};
  const size_t outside = kPersistent + 4096, head = kPersistent + pp.traces[0].head.kept_bytes() + 1024;
  pp.step = planner::StepBytes{};
  pp.step->persistent = kPersistent;
  pp.step->outside = outside;
  pp.step->head = head;
  pp.step->action = [](const Action& a, int p, bool in, bool cur, bool bnd) -> std::optional<size_t> {
    return made_up(a, p, in, cur, bnd);
  };
  std::map<std::vector<int>, StepTrace> spliced;
  auto trace_of = [&](const std::vector<int>& pol) -> const StepTrace& {
    auto it = spliced.find(pol);
    if (it == spliced.end()) it = spliced.emplace(pol, planner::splice(pp.traces, pol)).first;
    return it->second;
  };
  pp.step->plan = [&](const Schedule& s, const std::vector<int>& pol) -> std::optional<size_t> {
    return whole_step(trace_of(pol), s, pol, outside, head);
  };
  const planner::TimeModel tm = planner::flop_time(pp.traces);
  struct Priced {
    size_t peak;
    double time;
  };
  std::vector<Priced> all;
  planner::enumerate_family(L, int(policies.size()), [&](const Schedule& s, const std::vector<int>& pol) {
    all.push_back({whole_step(trace_of(pol), s, pol, outside, head), planner::schedule_time(tm, s, pol)});
  });
  std::sort(all.begin(), all.end(), [](const Priced& a, const Priced& b) { return a.peak < b.peak; });
  std::set<size_t> budgets;
  const size_t lo = all.front().peak, hi = all.back().peak;
  for (int k = 0; k <= 200; ++k) budgets.insert(lo + (hi - lo) * size_t(k) / 200);
  double best = std::numeric_limits<double>::infinity();
  for (const Priced& p : all)
    if (p.time < best) best = p.time, budgets.insert({p.peak - 1, p.peak, p.peak + 1});
  double last = std::numeric_limits<double>::infinity();
  int checked = 0;
  for (size_t b : budgets) {
    double fastest = std::numeric_limits<double>::infinity();
    for (const Priced& p : all)
      if (p.peak <= b) fastest = std::min(fastest, p.time);
    const std::optional<planner::ChainPlan> got = planner::fastest_plan(pp, b);
    if (!(fastest < std::numeric_limits<double>::infinity())) {
      EXPECT_FALSE(got.has_value()) << "budget " << b << " is below every plan";
      continue;
    }
    ASSERT_TRUE(got.has_value()) << "budget " << b << ": a plan fits";
    EXPECT_LE(got->step_peak, b);
    EXPECT_EQ(got->step_peak, whole_step(trace_of(got->block_policy), got->schedule, got->block_policy, outside, head));
    EXPECT_NEAR(got->time, fastest, 1e-9 * fastest) << "budget " << b << ": " << encode_schedule(got->schedule);
    EXPECT_LE(got->time, last * (1 + 1e-12)) << "budget " << b << " gives a slower plan than a smaller one";
    last = got->time;
    ++checked;
  }
  EXPECT_GT(checked, 200);
}

TEST(OptimalWholeStep, Gpt2HeterogeneousFourBlocksFourPolicies) { check(Arch::GPT2, 4, {"none", "selective", "gelu", "norms"}); }
TEST(OptimalWholeStep, LlamaHeterogeneousFiveBlocks) { check(Arch::Llama, 5, {"none", "selective"}); }
TEST(OptimalWholeStep, Gpt2HeterogeneousSixBlocks) { check(Arch::GPT2, 6, {"none", "gelu"}); }

}  // namespace
