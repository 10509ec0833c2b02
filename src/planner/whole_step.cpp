#include "planner/whole_step.h"

#include <algorithm>

#include "core/allocator.h"
#include "core/error.h"

namespace remat {

namespace {

// An action's key: the block's class, its candidate, kind, keep, pass, input from a checkpoint, a block output live,
// the block's input held as a checkpoint.
uint64_t key_of(const Action& a, int block_class, int candidate, bool in_checkpoint, bool cur_live, bool boundary) {
  return uint64_t(block_class) << 24 | uint64_t(candidate) << 12 | uint64_t(a.kind) << 8 | uint64_t(a.keep) << 5 |
         uint64_t(a.recompute) << 4 | uint64_t(in_checkpoint) << 2 | uint64_t(cur_live) << 1 | uint64_t(boundary);
}

size_t forward_phase_length(const Schedule& s) {
  size_t f = 0;
  while (f < s.size() && s[f].kind == Action::Kind::Forward && !s[f].recompute) ++f;
  return f;
}

}  // namespace

WholeStepModel::WholeStepModel(const Candidates& c, const PlanTarget& t) : c_(c), t_(t) {
  REMAT_ASSERT(c.problem.traces.size() < 4096 && c.cfg.L < (int64_t(1) << 39), "WholeStepModel: too many candidates");
  for (const planner::StepTrace& tr : c.problem.traces) {
    std::vector<planner::BlockMemory> b;
    for (const planner::PartTrace& p : tr.blocks) b.push_back(planner::block_memory(p));
    blocks_.push_back(std::move(b));
  }
  // Blocks alike under every candidate share their keys: a model of identical blocks has one class, so a
  // few dry runs measure it whatever its depth, and the DP's chain stays homogeneous (its tables grow
  // as L^2, not L^3). The first block (the embedding's output comes in) and the last (its output goes
  // to the head) hold what the others do: inconsistent() would count any key where they did not.
  const size_t L = blocks_.at(0).size();
  auto same = [](const planner::BlockMemory& a, const planner::BlockMemory& b) {
    return a.kept == b.kept && a.input == b.input && a.input_op == b.input_op && a.freed == b.freed && a.rebuilt == b.rebuilt;
  };
  class_.assign(L, 0);
  for (size_t i = 0; i < L; ++i) {
    class_[i] = int(i);
    for (size_t j = 0; j < i; ++j) {
      if (class_[j] != int(j)) continue;
      bool alike = true;
      for (size_t p = 0; p < blocks_.size() && alike; ++p) alike = same(blocks_[p][i], blocks_[p][j]);
      if (alike) {
        class_[i] = int(j);
        break;
      }
    }
  }
}

// What the executor (checkpoint/executor.cpp) holds before each action: which block's output is the
// current one (-1: none), which inputs are checkpoints, and whether a block recorded with its input
// held as one.
std::vector<uint64_t> WholeStepModel::action_keys(const planner::ChainPlan& plan) const {
  const Schedule& s = plan.schedule;
  const int L = int(c_.cfg.L);
  std::vector<char> boundary(size_t(L), 0), recorded_on_boundary(size_t(L), 0);
  std::vector<uint64_t> keys(s.size());
  const size_t f = forward_phase_length(s);
  int cur = 0;  // x0, the embedding's output
  for (size_t k = 0; k < s.size(); ++k) {
    const Action& a = s[k];
    const size_t i = size_t(a.block);
    if (k == f) cur = -1;  // x_L went to the head
    const int p = plan.block_policy.at(i);
    switch (a.kind) {
      case Action::Kind::Forward:
        keys[k] = key_of(a, class_[i], p, cur != a.block, cur >= 0, boundary[i]);
        if (a.keep == Keep::Boundary) boundary[i] = 1;
        if (a.keep == Keep::Internals) recorded_on_boundary[i] = boundary[i];
        cur = a.block + 1;
        break;
      case Action::Kind::Backward:
        keys[k] = key_of(a, class_[i], p, recorded_on_boundary[i], cur >= 0, boundary[i]);
        cur = -1;
        break;
      case Action::Kind::Free:
        keys[k] = key_of(a, class_[i], p, false, cur >= 0, boundary[i]);
        boundary[i] = 0;
        break;
    }
  }
  return keys;
}

planner::MemoryPrediction WholeStepModel::levels(const planner::ChainPlan& plan, planner::ActionLevels* lv) const {
  const planner::StepTrace& t0 = c_.problem.traces.at(0);  // the embedding and the head: no policy reaches them
  std::vector<const planner::BlockMemory*> b(blocks_.at(0).size());
  for (size_t i = 0; i < b.size(); ++i) b[i] = &blocks_.at(size_t(plan.block_policy.at(i)))[i];
  return planner::simulate_memory(b, t0.boundary_bytes, t0.embed.kept_bytes(), t0.head.kept_bytes(), plan.schedule, lv);
}

void WholeStepModel::observe(uint64_t key, size_t bytes) {
  const auto [it, fresh] = w_.emplace(key, bytes);
  if (!fresh && it->second != bytes) {
    ++inconsistent_;
    it->second = std::max(it->second, bytes);
  }
}

StepMemory WholeStepModel::measure(const planner::ChainPlan& plan, const std::vector<uint64_t>& keys) {
  planner::ActionLevels lv;
  levels(plan, &lv);
  const size_t n = plan.schedule.size(), f = forward_phase_length(plan.schedule);
  std::vector<size_t> w(n, 0);
  size_t head = 0, outside = 0, peak = 0, k = 0;
  // The peak since the last probe, and a fresh start for the next.
  auto read = [&] {
    Allocator& a = accountant();
    const size_t p = a.peak_total();
    a.reset_peak();
    peak = std::max(peak, p);
    return p;
  };
  auto above = [](size_t p, size_t level) {
    REMAT_ASSERT(p >= level, "WholeStepModel: the step holds less than its activations");
    return p - level;
  };
  StepOptions probe;
  probe.before_action = [&](const Action&) {
    const size_t p = read(), idx = k % n;
    if (idx == 0) outside = std::max(outside, p);  // the step up to the chain (every micro-batch's)
    else if (idx == f) head = std::max(head, above(p, lv.before_head));  // the head, forward and backward
    else w[idx] = std::max(w[idx], above(p, lv.before[idx]));  // nothing runs between two actions
  };
  probe.after_action = [&](const Action&) {
    const size_t idx = k % n;
    w[idx] = std::max(w[idx], above(read(), lv.before[idx]));
    ++k;
  };
  StepMemory m = dry_run_plan(unpriced_plan(c_, plan, t_), t_.data_bytes, &probe, t_.rank);
  REMAT_ASSERT(k == n * size_t(t_.accum()), "WholeStepModel: the probe missed actions");
  outside = std::max(outside, m.peak_total);  // the last micro-batch's embedding backward and AdamW
  peak = std::max(peak, m.peak_total);
  ++dry_runs_;
  for (size_t j = 0; j < n; ++j) observe(keys[j], w[j]);
  observe(uint64_t(-1), head);
  head_ = w_.at(uint64_t(-1));
  outside_ = std::max(outside_.value_or(0), outside);
  persistent_ = m.persistent;
  // The probes reset the allocator's peaks: only the whole step's total and what no plan changes hold.
  StepMemory r;
  r.peak_total = peak;
  r.persistent = m.persistent;
  r.peak_activation = plan.memory.peak_activation;
  return r;
}

size_t WholeStepModel::predict(const planner::ChainPlan& plan, const std::vector<uint64_t>& keys) const {
  planner::ActionLevels lv;
  levels(plan, &lv);
  size_t peak = std::max(*outside_, lv.before_head + *head_);
  for (size_t k = 0; k < keys.size(); ++k) peak = std::max(peak, lv.before[k] + w_.at(keys[k]));
  return peak;
}

std::optional<size_t> WholeStepModel::known_peak(const planner::ChainPlan& plan) const {
  const std::vector<uint64_t> keys = action_keys(plan);
  for (uint64_t k : keys)
    if (!w_.count(k)) return std::nullopt;
  return predict(plan, keys);
}

planner::StepBytes WholeStepModel::step_bytes() const {
  REMAT_ASSERT(head_ && outside_, "WholeStepModel: nothing measured yet");
  planner::StepBytes b;
  b.persistent = persistent_;
  b.outside = *outside_;
  b.head = *head_;
  b.action = [this](const Action& a, int p, bool in, bool cur, bool bnd) -> std::optional<size_t> {
    const auto it = w_.find(key_of(a, class_.at(size_t(a.block)), p, in, cur, bnd));
    if (it == w_.end()) return std::nullopt;
    return it->second;
  };
  b.plan = [this](const Schedule& s, const std::vector<int>& pol) {
    planner::ChainPlan cp;
    cp.schedule = s;
    cp.block_policy = pol;
    return known_peak(cp);
  };
  return b;
}

std::vector<StepMemory> WholeStepModel::price(const std::vector<const planner::ChainPlan*>& plans) {
  std::vector<std::vector<uint64_t>> keys(plans.size());
  std::unordered_map<uint64_t, std::vector<size_t>> plans_of;  // key -> the plans that have it
  std::vector<size_t> missing(plans.size(), 0);
  for (size_t j = 0; j < plans.size(); ++j) {
    keys[j] = action_keys(*plans[j]);
    std::vector<uint64_t> u = keys[j];
    std::sort(u.begin(), u.end());
    u.erase(std::unique(u.begin(), u.end()), u.end());
    for (uint64_t key : u)
      if (!w_.count(key)) plans_of[key].push_back(j), ++missing[j];
    if (!head_) ++missing[j];
  }
  std::vector<StepMemory> out(plans.size());
  std::vector<char> measured(plans.size(), 0);
  // Greedy cover: the plan with the most keys still unknown (the first on a tie), until none is.
  for (;;) {
    size_t best = plans.size();
    for (size_t j = 0; j < plans.size(); ++j)
      if (missing[j] > 0 && (best == plans.size() || missing[j] > missing[best])) best = j;
    if (best == plans.size()) break;
    const bool first = !head_;
    out[best] = measure(*plans[best], keys[best]);
    measured[best] = 1;
    for (auto it = plans_of.begin(); it != plans_of.end();) {
      if (!w_.count(it->first)) { ++it; continue; }
      for (size_t j : it->second) --missing[j];
      it = plans_of.erase(it);
    }
    if (first)
      for (size_t& m : missing) --m;
  }
  for (size_t j = 0; j < plans.size(); ++j) {
    if (measured[j]) continue;
    out[j].peak_total = predict(*plans[j], keys[j]);
    out[j].persistent = persistent_;
    out[j].peak_activation = plans[j]->memory.peak_activation;
  }
  return out;
}

}  // namespace remat
