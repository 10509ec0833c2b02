#include "train/summary.h"

#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace remat {

namespace {

std::string mib(size_t b) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f MiB", double(b) / double(1 << 20));
  return s;
}

std::string percent(double ratio) {
  char s[32];
  std::snprintf(s, sizeof s, "%+.1f%%", 100.0 * (ratio - 1.0));
  return s;
}

}  // namespace

namespace {
StepPlan store_all_plan(const PlanTarget& t) {
  const Candidates c = make_candidates(t.cfg, t.micro, t.T);
  return price_strategy(c, parse_strategy("none", int(t.cfg.L), false), "none", t);
}
}  // namespace

size_t store_all_whole_step(const PlanTarget& t) { return store_all_plan(t).step.peak_total; }

std::string plain_summary(const ReportInput& in, const PlanTarget& t, const ProcessFixed& fixed, bool planner_line) {
  const StepPlan all = store_all_plan(t);
  const size_t have = in.measure.peak_activation, every = all.activation_peak;
  const double flops = flop_overhead(in.measure.counters);
  std::string r = "in short: ";
  const bool is_none = in.strategy.name == "none" && !in.policy && in.block_policy.empty();
  if (is_none) {
    r += "this run kept every activation (" + mib(have) + " at the peak) and recomputed nothing";
  } else {
    r += "this run kept " + mib(have) + " of activations where storing everything keeps " + mib(every) + " (" +
         percent(double(have) / double(every)) + "), for ";
    if (in.step_s && in.store_all_step_s && *in.store_all_step_s > 0)
      r += percent(*in.step_s / *in.store_all_step_s) + " step time (measured against store-everything)";
    else
      r += percent(flops) + " FLOPs (step time not measured: add --compare-none)";
  }
  if (in.measure.whole_step) {
    const size_t pred = in.measure.whole_step->peak_total, meas = in.measure.peak_total;
    r += "; its whole step peaked at " + mib(meas) +
         (pred == meas ? ", as predicted to the byte" : ", predicted " + mib(pred));
  }
  r += ".\n";
  if (!planner_line) return r;
  // A budget to show the planner at work: for store-everything a quarter less than its whole step;
  // for a run that saves memory, half way between its whole step and store-everything's.
  const size_t whole = in.measure.whole_step ? in.measure.whole_step->peak_total : in.measure.peak_total;
  const double target = is_none ? 0.75 * double(whole) : 0.5 * (double(whole) + double(all.step.peak_total));
  const std::string why = is_none ? "a quarter less than this run's whole step"
                                  : "half way between this run's whole step and storing everything's, " +
                                        mib(all.step.peak_total);
  try {
    // The step's target as a process budget (what --budget means), rounded down to 0.1 MiB.
    const double budget_mib = std::floor(double(predicted_process(fixed, size_t(target))) / double(1 << 20) * 10.0) / 10.0;
    if (budget_mib <= 0) return r;
    char flag[48];
    std::snprintf(flag, sizeof flag, "--budget %gMiB", budget_mib);
    const size_t step_budget = step_budget_within(size_t(budget_mib * double(1 << 20)), fixed);
    if (step_budget == 0) return r;
    PlanTarget process_target = t;  // a refusal names the process's budget
    process_target.process = fixed;
    const StepPlan p = plan_for_budget(process_target, step_budget);
    const double ratio = p.compute.overhead();
    r += "the planner: under " + std::string(flag) + " for the process (its step " + mib(step_budget) + ", " + why +
         "), it would run " + p.summary + ", attention " + attention_label(p) + ": activations " +
         mib(p.activation_peak) + ", whole step " + mib(p.step.peak_total) + ", " + percent(ratio) +
         " FLOPs. Run it with `remat train " + flag + "`; `remat plan " + flag + "` shows the alternatives.\n";
  } catch (const Error& e) {
    // No plan fits there: say what the least is (the planner's own refusal names it).
    std::string msg = e.what();
    const size_t tag = msg.find("] "), hint = msg.find(" (hint: ");
    msg = msg.substr(tag == std::string::npos ? 0 : tag + 2, hint == std::string::npos ? std::string::npos : hint - tag - 2);
    r += "the planner: no plan fits " + why + "; " + msg + ".\n";
  }
  return r;
}

}  // namespace remat
