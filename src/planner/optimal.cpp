#include "planner/optimal.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdio>
#include <numeric>
#include <optional>

#include "core/allocator.h"
#include "core/error.h"
#include "planner/dp.h"

namespace remat::planner {

namespace {

using namespace dp;

// The spliced trace of the plans finish() prices, kept from plan to plan: only the blocks whose policy
// changed are copied (neighbouring plans of a frontier share most of them).
struct Splicer {
  const std::vector<StepTrace>& traces;
  StepTrace cur;
  std::vector<int> policy;
  explicit Splicer(const std::vector<StepTrace>& t) : traces(t), cur(t.at(0)), policy(cur.blocks.size(), 0) {}
  const StepTrace& get(const std::vector<int>& block_policy) {
    for (size_t i = 0; i < policy.size(); ++i)
      if (block_policy[i] != policy[i]) {
        cur.blocks[i] = traces.at(size_t(block_policy[i])).blocks[i];
        policy[i] = block_policy[i];
      }
    return cur;
  }
};

ChainPlan finish(const PlanProblem& pp, const Prepared& pr, const Tables& tb, size_t m, Splicer* splicer = nullptr) {
  Emitter e{pr.pb, tb, {}, std::vector<int>(size_t(pr.pb.L), 0)};
  e.seg(0, pr.pb.L, 0, m, true);
  ChainPlan plan;
  plan.time = tb.D(0)[m] + pr.pb.fixed;
  plan.schedule = std::move(e.out);
  plan.block_policy = std::move(e.policy);
  plan.policy_names = pp.policy_names;
  std::optional<Splicer> local;
  if (!splicer) splicer = &local.emplace(pp.traces);
  const StepTrace& tr = splicer->get(plan.block_policy);
  plan.memory = simulate_memory(tr, plan.schedule);
  plan.compute = predict_compute(tr, plan.schedule);
  plan.slot_bytes = pr.pb.q;
  if (pp.step) {
    const std::optional<size_t> step = pp.step->plan(plan.schedule, plan.block_policy);
    REMAT_ASSERT(step.has_value(), "planner: a whole-step plan with an action of unknown bytes");
    plan.step_peak = *step;
  }
  return plan;
}

// With slots coarser than the sizes' divisor, rounding can cost the DP a plan that fits to the byte;
// the textbook schedules (none, sqrt, uniform:K, either replay mode, with or without the last
// segment recomputed), each under every single policy, are priced exactly and win where they are
// faster. This keeps "never slower than a named strategy at its own memory" true at any resolution.
void improve_with_named(const PlanProblem& pp, const Prepared& pr, size_t budget, ChainPlan& best) {
  const int L = pr.pb.L;
  std::vector<int> Ks;
  for (int K = 1; K <= L; K += (K < 64 ? 1 : std::max(1, K / 16))) Ks.push_back(K);
  for (int p = 0; p < pr.pb.P; ++p) {
    const std::vector<int> pol(size_t(L), p);
    auto consider = [&](const StrategySpec& spec) {
      const Schedule sch = make_schedule(spec, L);
      const double t = schedule_time(pr.tm, sch, pol);
      if (!(t < best.time)) return;
      const MemoryPrediction m = simulate_memory(pp.traces[size_t(p)], sch);
      std::optional<size_t> step;
      if (pp.step && !(step = pp.step->plan(sch, pol))) return;
      if ((step ? *step : m.peak_activation) > budget) return;
      best.step_peak = step.value_or(0);
      best.schedule = sch;
      best.block_policy = pol;
      best.memory = m;
      best.compute = predict_compute(pp.traces[size_t(p)], sch);
      best.time = t;
    };
    consider(parse_strategy("none", L, false));
    for (bool last : {false, true}) {
      consider(parse_strategy("all", L, last));
      for (int K : Ks)
        for (bool internals : {false, true}) consider(parse_strategy("uniform:" + std::to_string(K), L, last, internals));
    }
  }
}

size_t slots_for(const Prepared& pr, size_t bytes) { return bytes > pr.emb ? (bytes - pr.emb) / pr.pb.q : 0; }
size_t frontier_slots(const Prepared& pr) {
  // Rounding every size up can lift a plan's slot count above its bytes by a slot per term.
  return ceil_div(pr.top > pr.emb ? pr.top - pr.emb : 0, pr.pb.q) + size_t(2 * pr.pb.L + 4);
}

}  // namespace

int max_planned_layers() {
  // The longest chain of same-shaped blocks check_dp_size accepts with the fewest slots (256).
  int lo = 1, hi = 1 << 20;
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    const double M = 256.0 + 2.0 * mid + 5.0;
    const double rows = 3.0 * (mid + 1);
    const bool ok = rows * (M + 1) * sizeof(double) <= kMaxTableBytes && 1.5 * double(mid) * mid * (M + 4) <= kMaxTableUpdates;
    if (ok) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

void check_plannable(int L) {
  if (L > max_planned_layers()) check_dp_size(L, 4, true, 256.0 + 2.0 * L + 5.0);
}

StepTrace splice(const std::vector<StepTrace>& traces, const std::vector<int>& block_policy) {
  StepTrace t = traces.at(0);
  for (size_t i = 0; i < t.blocks.size(); ++i)
    if (block_policy.at(i) != 0) t.blocks[i] = traces.at(size_t(block_policy[i])).blocks[i];
  return t;
}

std::string ChainPlan::summary() const {
  int ck = 0;
  const ScheduleCounts c = count(schedule);
  for (const Action& a : schedule)
    if (a.kind == Action::Kind::Forward && a.keep == Keep::Boundary && !a.recompute) ++ck;
  std::string s = std::to_string(ck) + " checkpoint" + (ck == 1 ? "" : "s") + ", " + std::to_string(c.recomputes) +
                  " block recompute" + (c.recomputes == 1 ? "" : "s");
  std::vector<int> n(policy_names.size(), 0);
  for (int p : block_policy) n[size_t(p)]++;
  for (size_t p = 0; p < n.size(); ++p)
    if (n[p] > 0 && policy_names[p] != "none") s += ", " + policy_names[p] + " on " + std::to_string(n[p]) + " block" + (n[p] == 1 ? "" : "s");
  return s;
}

std::optional<ChainPlan> fastest_plan(const PlanProblem& pp, size_t budget) {
  // Planning for the whole step, the DP's m counts bytes above what every plan holds.
  const size_t persistent = pp.step ? pp.step->persistent : 0;
  const size_t above = budget > persistent ? budget - persistent : 0;
  const Prepared pr = prepare(pp, above, false);
  const size_t M = std::min(slots_for(pr, above), frontier_slots(pr));
  Tables tb(pr.pb, M);
  fill(pr.pb, tb);
  if (budget < persistent + pr.emb || (pp.step && budget < pp.step->outside) || !(tb.D(0)[M] < kInf)) {
    if (pr.pb.q != pr.exact_q && !(pp.step && budget < pp.step->outside)) {  // the coarse DP found nothing; a textbook schedule may still fit
      ChainPlan named;
      named.time = kInf;
      named.policy_names = pp.policy_names;
      named.slot_bytes = pr.pb.q;
      improve_with_named(pp, pr, budget, named);
      if (named.time < kInf) return named;
    }
    return std::nullopt;
  }
  // The least memory that reaches the best cost.
  size_t m = M;
  while (m > 0 && tb.D(0)[m - 1] == tb.D(0)[M]) --m;
  ChainPlan plan = finish(pp, pr, tb, m);
  if (pr.pb.q != pr.exact_q) improve_with_named(pp, pr, budget, plan);
  return plan;
}

ChainPlan optimal_plan(const PlanProblem& pp, size_t budget) {
  if (std::optional<ChainPlan> plan = fastest_plan(pp, budget)) return std::move(*plan);
  {
    const ChainPlan least = least_memory_plan(pp);
    const StepTrace& t0 = pp.traces[0];
    throw Error("planner",
                "budget " + format_bytes(budget) + " is below the least activation memory of any plan, " +
                    format_bytes(least.memory.peak_activation) + " (" + least.summary() + "), for " + t0.cfg.describe() +
                    " at micro-batch " + std::to_string(t0.B) + ", seq " + std::to_string(t0.T),
                "raise the budget to at least " + format_bytes(least.memory.peak_activation) +
                    ", or use a smaller --micro-batch or --seq");
  }
}

ChainPlan least_memory_plan(const PlanProblem& pp) {
  const Prepared pr = prepare(pp, 0, true);
  Tables tb(pr.pb, frontier_slots(pr));
  fill(pr.pb, tb);
  size_t m = 0;
  while (!(tb.D(0)[m] < kInf)) ++m;
  return finish(pp, pr, tb, m);
}

std::vector<ChainPlan> optimal_frontier(const PlanProblem& pp) { return optimal_frontier(pp, 0); }

std::vector<ChainPlan> optimal_frontier(const PlanProblem& pp, size_t limit) {
  const Prepared pr = prepare(pp, limit, limit == 0);
  Tables tb(pr.pb, limit == 0 ? frontier_slots(pr) : std::min(slots_for(pr, limit), frontier_slots(pr)));
  fill(pr.pb, tb);
  std::vector<ChainPlan> all;
  const double* d = tb.D(0);
  Splicer splicer(pp.traces);
  double last = kInf;
  for (size_t m = 0; m <= tb.M(); ++m)
    if (d[m] < last) {
      all.push_back(finish(pp, pr, tb, m, &splicer));
      last = d[m];
    }
  // Exact bytes can order two slot-neighbours the other way: keep the Pareto set.
  // Planning for the whole step, its peak orders them.
  auto peak = [&](const ChainPlan& p) { return pp.step ? p.step_peak : p.memory.peak_activation; };
  std::sort(all.begin(), all.end(), [&](const ChainPlan& a, const ChainPlan& b) {
    return peak(a) != peak(b) ? peak(a) < peak(b) : a.time < b.time;
  });
  std::vector<ChainPlan> f;
  for (ChainPlan& p : all)
    if (f.empty() || p.time < f.back().time) f.push_back(std::move(p));
  return f;
}

}  // namespace remat::planner
