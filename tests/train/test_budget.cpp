// Training to a whole-step budget (issue #9, item 5): plan_for_budget returns the fastest plan of the
// optimal planner whose whole-step peak (every accounted byte: parameters, gradients, AdamW state,
// data, activations, their gradients, transients, workspace) fits; trained, the measured whole-step
// peak equals the prediction and stays within the budget, for several budgets on both
// architectures, flash attention allowed or not. A budget below every plan is refused before
// training, naming the least whole-step peak and its plan. With a calibration, plans are chosen and
// ranked by predict_time: the chosen plan is never slower, so priced, than any textbook strategy or
// frontier plan that fits.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "planner/budget.h"
#include "planner/frontier.h"
#include "train/run_data.h"
#include "train/trainer.h"
#include "options.h"

using namespace remat;

namespace {

double flops(const StepPlan& p) { return p.compute.fwd + p.compute.bwd + p.compute.recompute; }

ModelConfig config(Arch arch) {
  ModelConfig cfg;
  cfg.arch = arch;
  cfg.L = 5; cfg.C = 32; cfg.NH = 4; cfg.T = 16; cfg.V = 64; cfg.dropout = 0.1f;
  if (arch == Arch::Llama) cfg.KVH = 2;
  return cfg;
}

TrainOptions options(const ModelConfig& cfg) {
  TrainOptions o = test_options::quiet();
  o.model = cfg;
  o.random_tokens = 4096;
  o.steps = 1;
  o.batch = 4;
  o.micro_batch = 2;
  o.seq = cfg.T;
  return o;
}

void check_arch(Arch arch) {
  const ModelConfig cfg = config(arch);
  TrainOptions base = options(cfg);
  const PlanTarget t{cfg, base.batch, base.micro_batch, base.seq, data_bytes_for(base), false, std::nullopt};
  ASSERT_GT(t.data_bytes, 0u);
  const Candidates c = make_candidates(cfg, t.micro, t.T);
  // The least whole step of any plan: the whole-step frontier's first (not the least activation plan's).
  const StepPlan least = step_frontier(t, plan_kernels(t)).front();
  const StepPlan none = price_strategy(c, parse_strategy("none", int(cfg.L), false), "none", t);
  ASSERT_LT(least.step.peak_total, none.step.peak_total);
  // Every frontier plan, whole step priced: the chosen plan must be the fastest of those that fit.
  std::vector<StepPlan> frontier;
  for (const planner::ChainPlan& p : planner::optimal_frontier(c.problem)) frontier.push_back(price_plan(c, p, t));

  // And every textbook strategy under every policy: the DP's family holds them, but the DP ranks by
  // activation bytes and the budget is the whole step, which is not monotone in them.
  std::vector<StepPlan> textbook;
  for (const std::string& name : c.problem.policy_names)
    for (const char* s : {"none", "block", "sqrt", "uniform:2", "all"})
      for (bool last : {false, true}) textbook.push_back(price_strategy(c, parse_strategy(s, int(cfg.L), last), name, t));

  double last_flops = 1e300;
  int trained = 0;
  for (size_t budget : {least.step.peak_total, (least.step.peak_total + none.step.peak_total) / 2,
                        none.step.peak_total - 1, none.step.peak_total, none.step.peak_total * 2}) {
    SCOPED_TRACE("budget " + std::to_string(budget));
    const StepPlan plan = plan_for_budget(t, budget);
    EXPECT_LE(plan.step.peak_total, budget);
    EXPECT_LE(flops(plan), last_flops * (1 + 1e-12)) << "more budget gave a slower plan";
    last_flops = flops(plan);
    for (const StepPlan& f : frontier)
      if (f.step.peak_total <= budget) {
        EXPECT_GE(flops(f), flops(plan) * (1 - 1e-12)) << f.summary << " fits and is faster";
      }
    for (const StepPlan& f : textbook)
      if (f.step.peak_total <= budget) {
        EXPECT_GE(flops(f), flops(plan) * (1 - 1e-12)) << f.summary << " fits and is faster";
      }
    // Trained: the measured whole-step peak is the prediction, within the budget.
    TrainOptions o = base;
    apply_plan(plan, o);
    Trainer tr(o);
    const TrainSummary s = tr.run();
    EXPECT_EQ(s.measure.peak_total, plan.step.peak_total) << plan.summary;
    EXPECT_LE(s.measure.peak_total, budget) << plan.summary;
    EXPECT_EQ(s.measure.peak_activation, plan.activation_peak) << plan.summary;
    ++trained;
  }
  EXPECT_EQ(trained, 5);
  EXPECT_EQ(plan_for_budget(t, none.step.peak_total).compute.recompute, 0.0);

  // Flash attention allowed: the plan may switch kernels; it still fits, measured.
  PlanTarget tf = t;
  tf.allow_flash = true;
  const size_t budget = (least.step.peak_total + none.step.peak_total) / 2;
  const StepPlan pf = plan_for_budget(tf, budget);
  EXPECT_LE(flops(pf), flops(plan_for_budget(t, budget)) * (1 + 1e-12));
  TrainOptions o = base;
  apply_plan(pf, o);
  EXPECT_EQ(o.model.attention, pf.cfg.attention);
  Trainer tr(o);
  const TrainSummary s = tr.run();
  EXPECT_EQ(s.measure.peak_total, pf.step.peak_total) << pf.summary;
  EXPECT_LE(s.measure.peak_total, budget);

  // One byte below the least plan: refused before any training, naming the minimum and the plan.
  try {
    plan_for_budget(t, least.step.peak_total - 1);
    ADD_FAILURE() << "an impossible budget was accepted";
  } catch (const Error& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("[budget]"), std::string::npos) << w;
    EXPECT_NE(w.find("least whole-step peak of any plan, " + format_bytes(least.step.peak_total)), std::string::npos) << w;
    EXPECT_NE(w.find(least.summary), std::string::npos) << w;
    EXPECT_NE(w.find("smaller --micro-batch or --seq"), std::string::npos) << w;
  }
}

TEST(Budget, TrainedWholeStepPeakFitsGpt2) { check_arch(Arch::GPT2); }
TEST(Budget, TrainedWholeStepPeakFitsLlama) { check_arch(Arch::Llama); }

// apply_plan hands a plan to the run as it is (its schedule, policy and kernel per block, typed: no
// spelling to parse again), a named strategy labelled by its name; the trainer runs exactly that.
TEST(Budget, ApplyPlanHandsTheTypedPlanToTheRun) {
  const ModelConfig cfg = config(Arch::GPT2);
  const TrainOptions base = options(cfg);
  const PlanTarget t{cfg, base.batch, base.micro_batch, base.seq, 0, false, std::nullopt};
  const Candidates c = make_candidates(cfg, t.micro, t.T);
  TrainOptions o = base;
  const StepPlan block = price_strategy(c, parse_strategy("uniform:2", 5, true, true), "selective", t);
  apply_plan(block, o);
  EXPECT_EQ(o.recompute, "uniform:2");
  EXPECT_TRUE(o.recompute_last);
  EXPECT_TRUE(o.replay_internals);
  ASSERT_TRUE(o.schedule.has_value());
  EXPECT_EQ(*o.schedule, block.schedule);
  EXPECT_EQ(o.block_policy, block.block_policy);
  EXPECT_EQ(short_spelling(block), "--recompute uniform:2 --recompute-last --segment-replay internals --policy selective");
  bool mixed_seen = false;
  for (const planner::ChainPlan& p : planner::optimal_frontier(c.problem)) {
    const StepPlan sp = price_plan(c, p, t);
    TrainOptions q = base;
    apply_plan(sp, q);
    q.random_tokens = 4096;
    q.steps = 1;
    Trainer trainer(q);
    const StepOptions so = trainer.step_options();
    EXPECT_EQ(so.schedule, sp.schedule) << sp.summary;
    ASSERT_EQ(so.block_policy.size(), 5u);
    for (int i = 0; i < 5; ++i) {
      const NamePolicy want = c.model->policy(sp.block_policy[size_t(i)]);
      for (const char* local : {"attn.probs", "mlp.gelu", "ln_1", "ln_2"}) {
        const std::string name = c.model->layer_prefix(i) + local;
        const bool kept = so.block_policy[size_t(i)] ? so.block_policy[size_t(i)]->keep(name) : true;
        EXPECT_EQ(kept, want.keep(name)) << name << " in " << sp.summary;
      }
    }
    for (const std::string& n : sp.block_policy) mixed_seen = mixed_seen || n != sp.block_policy.front();
  }
  EXPECT_TRUE(mixed_seen);
}

// A synthetic calibration of `cfg` at (micro, T) in which a first pass that stores costs more than a
// checkpoint replayed with its internals, except under the selective policies: the fastest plan by
// time is not the fastest by FLOPs. Integer seconds.
planner::Calibration calibration_of(const ModelConfig& cfg, int64_t micro, int64_t T) {
  planner::Calibration c;
  c.cfg = cfg;
  c.B = micro;
  c.T = T;
  c.threads = 2;
  c.repeats = 1;
  c.embed_forward = 7;
  c.head_forward = 11;
  c.head_backward = 13;
  c.embed_backward = 5;
  c.rest = 17;
  c.forward_pass = 100;
  c.recompute_pass = 60;
  c.free_checkpoint = 3;
  c.policies = {{"none", 200, 130, 380, 290},  {"selective", 150, 160, 330, 340}, {"gelu", 190, 120, 400, 310},
                {"swiglu", 170, 140, 390, 300}, {"norms", 180, 150, 350, 320}};
  return c;
}

void check_calibrated(Arch arch) {
  const ModelConfig cfg = config(arch);
  const TrainOptions base = options(cfg);
  PlanTarget t{cfg, base.batch, base.micro_batch, base.seq, 4096, false, std::nullopt};
  t.calibration = calibration_of(cfg, t.micro, t.T);
  const Candidates c = make_candidates(cfg, t.micro, t.T, &*t.calibration);
  const Candidates by_flops = make_candidates(cfg, t.micro, t.T);
  std::vector<StepPlan> others;
  for (const std::string& name : c.problem.policy_names)
    for (const char* s : {"none", "block", "sqrt", "uniform:2", "all"})
      for (bool last : {false, true})
        for (bool internals : {false, true})
          others.push_back(price_strategy(c, parse_strategy(s, int(cfg.L), last, internals), name, t));
  for (const planner::ChainPlan& p : planner::optimal_frontier(c.problem)) others.push_back(price_plan(c, p, t));
  // The least whole step of any plan: the whole-step frontier's first (not the least activation plan's).
  const StepPlan least = step_frontier(t, plan_kernels(t)).front();
  const StepPlan none = price_strategy(c, parse_strategy("none", int(cfg.L), false), "none", t);
  double last = 1e300;
  int differs = 0;
  for (size_t k = 0; k <= 8; ++k) {
    const size_t budget = least.step.peak_total + (none.step.peak_total - least.step.peak_total) * k / 8;
    SCOPED_TRACE("budget " + std::to_string(budget));
    const StepPlan plan = plan_for_budget(t, budget);
    ASSERT_TRUE(plan.seconds.has_value());
    EXPECT_LE(plan.step.peak_total, budget);
    // Its seconds are predict_time's, for the whole optimizer step (two micro-batches, the rest once).
    std::vector<int> idx;
    for (const std::string& n : plan.block_policy) idx.push_back(t.calibration->policy_index(n));
    const planner::TimePrediction tp = planner::predict_time(*t.calibration, plan.schedule, idx);
    EXPECT_EQ(*plan.seconds, 2 * tp.step - t.calibration->rest);
    EXPECT_LE(*plan.seconds, last) << "more budget gave a slower plan";
    last = *plan.seconds;
    for (const StepPlan& o : others)
      if (o.step.peak_total <= budget) {
        EXPECT_GE(*o.seconds, *plan.seconds) << o.summary << " fits and is faster";
      }
    // The FLOP planner's choice, priced by the calibration, is never faster, and somewhere slower.
    PlanTarget tf = t;
    tf.calibration.reset();
    const StepPlan f = plan_for_budget(tf, budget);
    EXPECT_FALSE(f.seconds.has_value());
    std::vector<int> fidx;
    for (const std::string& n : f.block_policy) fidx.push_back(t.calibration->policy_index(n));
    const double f_seconds = 2 * planner::predict_time(*t.calibration, f.schedule, fidx).step - t.calibration->rest;
    EXPECT_GE(f_seconds, *plan.seconds);
    differs += f_seconds > *plan.seconds;
  }
  EXPECT_GT(differs, 0) << "the calibration should change some plan";
  // One kernel's calibration cannot price --attention auto.
  PlanTarget ta = t;
  ta.allow_flash = true;
  try {
    plan_for_budget(ta, none.step.peak_total);
    ADD_FAILURE() << "a calibration was used for two kernels";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a calibration prices one attention kernel"), std::string::npos) << e.what();
  }
}

TEST(Budget, CalibratedPlanIsNeverSlowerThanWhatFitsGpt2) { check_calibrated(Arch::GPT2); }
TEST(Budget, CalibratedPlanIsNeverSlowerThanWhatFitsLlama) { check_calibrated(Arch::Llama); }

}  // namespace
