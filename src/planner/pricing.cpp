#include "planner/pricing.h"

#include <algorithm>

#include "core/error.h"

namespace remat::planner {

namespace {
// The FLOP model over part(i, p), block i under policy p, and `t`, the trace whose embedding and head
// are fixed.
template <class Part>
TimeModel flops_of(Part part, const StepTrace& t) {
  TimeModel tm;
  tm.forward_pass = tm.recompute_pass = [part](int i) { return part(i, 0).fwd_flops(); };
  tm.forward_store = tm.recompute_store = [part](int i, int p) { return part(i, p).fwd_flops(); };
  tm.backward_stored = tm.backward_replayed = [part](int i, int p) { return part(i, p).bwd_flops(); };
  tm.rebuild = [part](int i, int p) { return part(i, p).rebuild_flops(); };
  tm.free_checkpoint = [](int) { return 0.0; };
  tm.fixed = t.embed.fwd_flops() + t.head.fwd_flops() + t.embed.bwd_flops() + t.head.bwd_flops();
  return tm;
}
}  // namespace

TimeModel flop_time(const std::vector<StepTrace>& traces) {
  return flops_of([&traces](int i, int p) -> const PartTrace& { return traces[size_t(p)].blocks[size_t(i)]; },
                  traces.at(0));
}

ScheduleCost price_schedule(const TimeModel& tm, const Schedule& s, const std::vector<int>& block_policy) {
  REMAT_ASSERT(tm.valid(), "price_schedule: a time model with some of its terms missing");
  ScheduleCost c;
  c.fixed = c.total = tm.fixed;
  int blocks = 0;
  for (const Action& a : s) blocks = std::max(blocks, a.block + 1);
  REMAT_ASSERT(block_policy.empty() || block_policy.size() >= size_t(blocks), "price_schedule: one policy per block");
  std::vector<char> replayed(size_t(blocks), 0);  // per block: were its internals recorded by a replay?
  auto pol = [&](int i) { return block_policy.empty() ? 0 : block_policy[size_t(i)]; };
  for (const Action& a : s) {
    const int i = a.block;
    switch (a.kind) {
      case Action::Kind::Forward: {
        double t;
        if (a.keep == Keep::Internals) {
          t = a.recompute ? tm.recompute_store(i, pol(i)) : tm.forward_store(i, pol(i));
          replayed[size_t(i)] = a.recompute;
        } else {
          t = a.recompute ? tm.recompute_pass(i) : tm.forward_pass(i);
        }
        (a.recompute ? c.recompute : c.forward) += t;
        ++(a.recompute ? c.block_recomputes : c.block_forwards);
        c.total += t;
        break;
      }
      case Action::Kind::Backward: {
        const bool re = replayed[size_t(i)];
        const double b = re ? tm.backward_replayed(i, pol(i)) : tm.backward_stored(i, pol(i));
        const double r = tm.rebuild ? tm.rebuild(i, pol(i)) : 0.0;
        c.backward += b;
        c.rebuild += r;
        ++(re ? c.replayed_backwards : c.stored_backwards);
        c.total += b + r;
        break;
      }
      case Action::Kind::Free: {
        const double f = tm.free_checkpoint(i);
        c.free += f;
        c.total += f;
        break;
      }
    }
  }
  return c;
}

double schedule_time(const TimeModel& tm, const Schedule& s, const std::vector<int>& block_policy) {
  return price_schedule(tm, s, block_policy).total;
}

ComputePrediction predict_compute(const StepTrace& tr, const Schedule& s) {
  const TimeModel tm = flops_of([&tr](int i, int) -> const PartTrace& { return tr.blocks[size_t(i)]; }, tr);
  const ScheduleCost c = price_schedule(tm, s, {});
  ComputePrediction p;
  p.fwd = tr.embed.fwd_flops() + tr.head.fwd_flops() + c.forward;
  p.bwd = tr.embed.bwd_flops() + tr.head.bwd_flops() + c.backward;
  p.recompute = c.recompute + c.rebuild;  // each dropped tensor is rebuilt once per holder
  p.block_forwards = c.block_forwards;
  p.block_recomputes = c.block_recomputes;
  return p;
}

}  // namespace remat::planner
