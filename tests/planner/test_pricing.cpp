// One walk prices a schedule (planner/pricing.h): the FLOP count, the calibrated step time and the
// DP's objective are price_schedule under one model or another. Checked against a reference written
// here, term by term, over every schedule and policy assignment of a small chain; the parts of a
// price sum to its total.
#include <gtest/gtest.h>

#include "planner/calibration.h"
#include "planner/optimal.h"
#include "planner/pricing.h"

using namespace remat;
using planner::StepTrace;

namespace {

struct Chain {
  std::unique_ptr<Model> model;
  std::vector<NamePolicy> policies;
  std::vector<StepTrace> traces;
};

Chain chain(Arch arch) {
  ModelConfig c;
  c.arch = arch;
  c.L = 3, c.C = 32, c.NH = 4, c.T = 16, c.V = 64, c.dropout = 0.1f;
  if (arch == Arch::Llama) c.KVH = 2;
  Chain ch;
  ch.model = planner::shape_only_model(c);
  ch.policies = {ch.model->policy("none"), ch.model->policy("selective")};
  for (const NamePolicy& p : ch.policies) ch.traces.push_back(planner::trace_step(*ch.model, 2, 16, p.keeps_all() ? nullptr : &p));
  return ch;
}

// The FLOPs of `s`, written out: every forward's FLOPs (a replay's as recompute), every backward's,
// and each backward's rebuilds as recompute; the embedding and head in fwd and bwd.
planner::ComputePrediction reference(const StepTrace& tr, const Schedule& s) {
  planner::ComputePrediction p;
  for (const planner::OpRecord& o : tr.embed.ops) p.fwd += o.fwd_flops, p.bwd += o.bwd_flops;
  for (const planner::OpRecord& o : tr.head.ops) p.fwd += o.fwd_flops, p.bwd += o.bwd_flops;
  for (const Action& a : s) {
    const planner::PartTrace& b = tr.blocks[size_t(a.block)];
    for (const planner::OpRecord& o : b.ops) {
      if (a.kind == Action::Kind::Forward) (a.recompute ? p.recompute : p.fwd) += o.fwd_flops;
      if (a.kind == Action::Kind::Backward) p.bwd += o.bwd_flops, p.recompute += o.rebuild_flops;
    }
    if (a.kind == Action::Kind::Forward) ++(a.recompute ? p.block_recomputes : p.block_forwards);
  }
  return p;
}

TEST(Pricing, FlopsOfEverySchedulePricedOnceMatchAReferenceWalk) {
  for (Arch arch : {Arch::GPT2, Arch::Llama}) {
    const Chain ch = chain(arch);
    const planner::TimeModel tm = planner::flop_time(ch.traces);
    int n = 0, with_rebuilds = 0;
    planner::enumerate_family(3, 2, [&](const Schedule& s, const std::vector<int>& pol) {
      const StepTrace tr = planner::splice(ch.traces, pol);
      const planner::ComputePrediction got = planner::predict_compute(tr, s), want = reference(tr, s);
      ASSERT_EQ(got.fwd, want.fwd);
      ASSERT_EQ(got.bwd, want.bwd);
      ASSERT_EQ(got.recompute, want.recompute);
      ASSERT_EQ(got.block_forwards, want.block_forwards);
      ASSERT_EQ(got.block_recomputes, want.block_recomputes);
      // The DP's objective under FLOPs is the same count: one walk.
      const planner::ScheduleCost c = planner::price_schedule(tm, s, pol);
      ASSERT_EQ(c.total, want.fwd + want.bwd + want.recompute);
      ASSERT_EQ(c.total, c.fixed + c.forward + c.recompute + c.backward + c.rebuild + c.free);
      ASSERT_EQ(planner::schedule_time(tm, s, pol), c.total);
      with_rebuilds += c.rebuild > 0;
      ++n;
    });
    EXPECT_GT(n, 50);
    EXPECT_GT(with_rebuilds, 0) << "selective must rebuild something in some schedule, or the rebuild term is untested";
  }
}

TEST(Pricing, CalibratedStepTimeIsTheSameWalk) {
  const Chain ch = chain(Arch::GPT2);
  planner::Calibration cal;
  cal.cfg = ch.model->config();
  cal.embed_forward = 1, cal.head_forward = 2, cal.head_backward = 4, cal.embed_backward = 8, cal.rest = 16;
  cal.forward_pass = 32, cal.recompute_pass = 64, cal.free_checkpoint = 128;
  cal.policies = {{"none", 256, 512, 1024, 2048}, {"selective", 4096, 8192, 16384, 32768}};
  const planner::TimeModel tm = planner::calibrated_time(cal, {"none", "selective"});
  int n = 0;
  planner::enumerate_family(3, 2, [&](const Schedule& s, const std::vector<int>& pol) {
    const planner::TimePrediction t = planner::predict_time(cal, s, pol);
    const planner::ScheduleCost c = planner::price_schedule(tm, s, pol);
    ASSERT_EQ(t.step, c.total);
    ASSERT_EQ(t.step, t.fixed + t.forward + t.recompute + t.backward + t.free);  // powers of two: exact
    ASSERT_EQ(c.rebuild, 0.0);  // a calibration's backward terms hold the rebuilds
    // Every term is a distinct power of two, so the total says how often each was priced.
    const ScheduleCounts k = count(s);
    ASSERT_EQ(t.stored_backwards + t.replayed_backwards, k.backwards);
    ++n;
  });
  EXPECT_GT(n, 50);
}

}  // namespace
