// The memory/compute report: the one-line answer at the top (activations against store-everything's
// prediction, step time from measured times only), the category total, the separate peaks labelled
// as such, the JSON fields of the headline, and --compare-none's timing (compare_against_none).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/allocator.h"
#include "planner/planner.h"
#include "train/report.h"
#include "train/trainer.h"

using namespace remat;

namespace {

TrainOptions small_opts(const std::string& strategy) {
  TrainOptions o;
  o.model.L = 4;
  o.model.C = 32;
  o.model.NH = 2;
  o.model.T = 16;
  o.model.V = 256;
  o.steps = 2;
  o.batch = 2;
  o.warmup = 1;
  o.seed = 3;
  o.eval_every = 0;
  o.eval_batches = 1;
  o.sample_tokens = 0;
  o.progress = false;
  o.quiet = true;
  o.recompute = strategy;
  return o;
}

struct Run {
  std::unique_ptr<Trainer> t;
  TrainSummary s;
  ReportInput in;
};

std::unique_ptr<Run> run(const TrainOptions& o) {
  auto r = std::make_unique<Run>();
  r->t = std::make_unique<Trainer>(o);
  r->s = r->t->run();
  const Trainer& t = *r->t;
  r->in = ReportInput{&r->t->model(), o.batch, o.model.T, 1, t.strategy(), r->s.measure,
                      t.policy().keeps_all() ? nullptr : &t.policy(), t.policy().label()};
  return r;
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

std::string mib(size_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", double(b) / (1024.0 * 1024.0));
  return buf;
}

size_t predicted_store_all(const Model& m, int64_t B, int64_t T) {
  const auto tr = planner::trace_step(m, B, T, nullptr);
  const int L = m.num_layers();
  return planner::simulate_memory(tr, make_schedule(parse_strategy("none", L, false), L)).peak_activation;
}

std::string between(const std::string& s, const std::string& from, const std::string& to) {
  const size_t a = s.find(from), b = s.find(to);
  return a == std::string::npos || b == std::string::npos ? "" : s.substr(a, b - a);
}

}  // namespace

TEST(Report, HeadlineComesFirstAndAsksForAMeasuredBaseline) {
  const auto r = run(small_opts("block"));
  const std::string rep = memory_report(r->in);
  const std::string head = first_line(rep);
  EXPECT_EQ(head, report_headline(r->in));
  const size_t all = predicted_store_all(r->t->model(), 2, 16);
  const size_t have = r->s.measure.peak_activation;
  ASSERT_LT(have, all);
  char pct[32];
  std::snprintf(pct, sizeof pct, "(%+.1f%%)", 100.0 * (double(have) / double(all) - 1.0));
  EXPECT_EQ(head.rfind("activations " + mib(have) + " MiB instead of " + mib(all) + " MiB " + pct + ", ", 0), 0u)
      << head;
  EXPECT_NE(head.find("step time against store-everything not measured: rerun with --compare-none"), std::string::npos)
      << head;
  EXPECT_NE(head.find("the dry run's prediction for store-everything"), std::string::npos) << head;
  EXPECT_NE(rep.find("step time against store-everything: not measured (rerun with --compare-none)"), std::string::npos);
}

// Store-everything is the baseline: its headline says so instead of "X MiB instead of X MiB (+0.0%)".
TEST(Report, StoreEverythingHeadlineSaysItIsTheBaseline) {
  const auto r = run(small_opts("none"));
  const std::string head = report_headline(r->in);
  EXPECT_EQ(head.rfind("activations " + mib(r->s.measure.peak_activation) +
                           " MiB, store-everything itself (nothing dropped or recomputed), ",
                       0),
            0u)
      << head;
  EXPECT_EQ(head.find("instead of"), std::string::npos) << head;
}

TEST(Report, HeadlineStepTimeIsTheMeasuredRatio) {
  const auto r = run(small_opts("sqrt"));
  ReportInput in = r->in;
  in.store_all_step_s = 0.200;
  in.step_s = 0.250;
  in.timed_steps = 3;
  const std::string head = report_headline(in);
  EXPECT_NE(head.find("), step time +25.0% against store-everything ["), std::string::npos) << head;
  EXPECT_NE(head.find("step time: measured, median of 3 step(s) each on the same batches, 250.0 ms against 200.0 ms"),
            std::string::npos)
      << head;
  EXPECT_EQ(head.find("rerun"), std::string::npos) << head;
  EXPECT_EQ(head.find("FLOP"), std::string::npos) << head;  // the time is never the FLOP count
  EXPECT_EQ(first_line(memory_report(in)), head);
  EXPECT_NE(memory_report(in).find("step time, measured (median of 3 step(s) each"), std::string::npos);
  in.step_s = 0.190;  // faster than store-everything (noise): said as it is
  EXPECT_NE(report_headline(in).find("step time -5.0% against store-everything"), std::string::npos);
  in.store_all_step_s.reset();
  in.step_s.reset();
  in.compare_note = "[memory] too big";
  EXPECT_NE(report_headline(in).find("not measured: --compare-none failed ([memory] too big)"), std::string::npos);
}

TEST(Report, CategoriesHaveATotalAndThePartsAreLabelledSeparatePeaks) {
  const auto r = run(small_opts("sqrt"));
  const std::string rep = memory_report(r->in);
  const StepMeasure& m = r->s.measure;
  size_t sum = 0;
  for (size_t b : m.peak_category) sum += b;
  std::istringstream lines(rep);
  std::string total;
  for (std::string l; std::getline(lines, l);)
    if (l.rfind("  total ", 0) == 0 && l.find("all categories at once") != std::string::npos) total = l;
  ASSERT_FALSE(total.empty()) << rep;
  EXPECT_NE(total.find(" " + mib(m.peak_total) + " MiB"), std::string::npos) << total;
  EXPECT_NE(total.find("sum to " + mib(sum) + " MiB"), std::string::npos) << total;
  EXPECT_GT(sum, m.peak_total);  // why the total is not the sum
  // sqrt: the parts' own peaks add up to more than the activation peak, and the report says so.
  EXPECT_GT(m.peak_checkpoint + m.peak_recompute + m.peak_saved, m.peak_activation);
  EXPECT_NE(rep.find("each at its own peak (separate peaks, at different moments: they need not add up to the "
                     "activation peak)"),
            std::string::npos)
      << rep;
}

TEST(Report, NoReferenceToTheSpec) {
  for (const char* s : {"none", "sqrt", "all"}) {
    const auto r = run(small_opts(s));
    const std::string rep = memory_report(r->in);
    for (const char* word : {"spec", "Spec", "SPEC"}) EXPECT_EQ(rep.find(word), std::string::npos) << s << "\n" << rep;
    const nlohmann::json j = report_json(r->in);
    for (auto it = j.begin(); it != j.end(); ++it) EXPECT_EQ(it.key().find("spec"), std::string::npos) << it.key();
  }
  EXPECT_NEAR(textbook_overhead(parse_strategy("sqrt", 9, false), 9), 4.0 / 3.0, 1e-12);
  EXPECT_NEAR(textbook_overhead(parse_strategy("none", 9, false), 9), 1.0, 1e-12);
}

TEST(Report, JsonCarriesTheHeadlineFigures) {
  const auto r = run(small_opts("block"));
  nlohmann::json j = report_json(r->in);
  const size_t all = predicted_store_all(r->t->model(), 2, 16);
  EXPECT_EQ(j.at("headline").get<std::string>(), report_headline(r->in));
  EXPECT_EQ(j.at("store_all_activation_bytes_predicted").get<size_t>(), all);
  EXPECT_NEAR(j.at("activation_saving_fraction").get<double>(), 1.0 - double(r->s.measure.peak_activation) / double(all),
              1e-12);
  for (const char* k : {"step_time_s_measured", "store_all_step_time_s_measured", "step_time_overhead_measured",
                        "store_all_activation_bytes_measured"})
    EXPECT_TRUE(j.at(k).is_null()) << k;
  EXPECT_EQ(j.at("peak_total_bytes").get<size_t>(), r->s.measure.peak_total);
  EXPECT_EQ(j.at("category_peak_bytes").at("saved_activation").get<size_t>(),
            r->s.measure.peak_category[size_t(Category::SavedActivation)]);
  // Stable keys stay.
  for (const char* k : {"peak_activation_bytes", "predicted_activation_bytes", "overhead_flops_measured",
                        "overhead_predicted", "overhead_textbook"})
    EXPECT_TRUE(j.contains(k)) << k;
  ReportInput in = r->in;
  in.store_all_step_s = 0.4;
  in.step_s = 0.5;
  in.timed_steps = 3;
  in.store_all_peak_measured = all;
  j = report_json(in);
  EXPECT_DOUBLE_EQ(j.at("step_time_s_measured").get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(j.at("store_all_step_time_s_measured").get<double>(), 0.4);
  EXPECT_DOUBLE_EQ(j.at("step_time_overhead_measured").get<double>(), 1.25);
  EXPECT_EQ(j.at("timed_steps").get<int>(), 3);
  EXPECT_EQ(j.at("store_all_activation_bytes_measured").get<size_t>(), all);
}

TEST(Report, CompareAgainstNoneTimesBothAndLeavesTheReportOfTheRun) {
  const TrainOptions o = small_opts("block");
  const auto r = run(o);
  const std::string before = memory_report(r->in);
  std::vector<std::vector<float>> w;
  for (const Param& p : r->t->model().params()) w.emplace_back(p.value.data(), p.value.data() + p.value.numel());
  ReportInput in = r->in;
  compare_against_none(in, o, 3);
  ASSERT_TRUE(in.compare_note.empty()) << in.compare_note;
  ASSERT_TRUE(in.store_all_step_s && in.step_s);
  EXPECT_GT(*in.store_all_step_s, 0);
  EXPECT_GT(*in.step_s, 0);
  EXPECT_EQ(in.timed_steps, 3);
  // The store-everything steps measured what the dry run predicts for them.
  EXPECT_EQ(*in.store_all_peak_measured, predicted_store_all(r->t->model(), 2, 16));
  const std::string after = memory_report(in);
  EXPECT_NE(first_line(after).find("against store-everything ["), std::string::npos) << first_line(after);
  // The per-layer and largest-tensor tables still describe the run (block), not the timing steps.
  EXPECT_EQ(between(after, "activation bytes per layer", "== compute =="),
            between(before, "activation bytes per layer", "== compute =="));
  // The run's weights are untouched.
  size_t i = 0;
  for (const Param& p : r->t->model().params())
    EXPECT_EQ(std::vector<float>(p.value.data(), p.value.data() + p.value.numel()), w[i++]) << p.name;
}

TEST(Report, TimeAgainstNoneReturnsMediansOfTheTimedSteps) {
  const StepTiming t = time_against_none(small_opts("all"), 1, 0);
  EXPECT_GT(t.store_all_s, 0);
  EXPECT_GT(t.run_s, 0);
  EXPECT_EQ(t.timed, 1);
  EXPECT_GT(t.store_all_peak_activation, 0u);
}

TEST(Report, CompareAgainstNoneFailsIntoANoteNotAnException) {
  TrainOptions o = small_opts("block");
  const auto r = run(o);
  // A limit the run fits in but a second, store-everything trainer beside it does not.
  o.memory_limit = r->s.measure.peak_total + (size_t(64) << 10);
  ReportInput in = r->in;
  compare_against_none(in, o, 1);
  Allocator::global().set_limit(0);
  EXPECT_NE(in.compare_note.find("[memory]"), std::string::npos) << in.compare_note;
  EXPECT_FALSE(in.store_all_step_s.has_value());
  EXPECT_NE(report_headline(in).find("--compare-none failed ([memory]"), std::string::npos) << report_headline(in);
  // A limit that lets the store-everything trainer be built beside the run's but not finish its first
  // step: the per-layer tables still describe the run, not the half-done step.
  const StepMeasure& m = r->s.measure;
  const size_t persistent = m.peak_category[size_t(Category::Parameter)] + m.peak_category[size_t(Category::Gradient)] +
                            m.peak_category[size_t(Category::OptimizerState)] + m.peak_category[size_t(Category::Data)];
  o.memory_limit = m.peak_total + persistent + (size_t(64) << 10);
  const std::string before = memory_report(r->in);
  ReportInput mid = r->in;
  compare_against_none(mid, o, 1);
  Allocator::global().set_limit(0);
  EXPECT_NE(mid.compare_note.find("[memory] allocating"), std::string::npos) << mid.compare_note;
  EXPECT_EQ(mid.compare_note.find("adam"), std::string::npos) << mid.compare_note;  // not while building it
  EXPECT_EQ(between(memory_report(mid), "activation bytes per layer", "== compute =="),
            between(before, "activation bytes per layer", "== compute =="));
  // Interrupted (SIGINT during the timing): a note too.
  std::atomic<int> stop{2};
  TrainOptions s = small_opts("block");
  s.stop = &stop;
  ReportInput in2 = r->in;
  compare_against_none(in2, s, 1);
  EXPECT_NE(in2.compare_note.find("interrupted"), std::string::npos) << in2.compare_note;
}

// The whole step, every accounted byte: the trainer's dry run of the step beside the measurement, per
// category and in total, and whether they agree; then the heap outside the allocator.
TEST(Report, WholeStepPredictionBesideTheMeasurement) {
  const auto r = run(small_opts("sqrt"));
  const StepMeasure& m = r->s.measure;
  ASSERT_TRUE(m.whole_step.has_value());
  ASSERT_TRUE(m.untracked_heap.has_value());
  const std::string rep = memory_report(r->in);
  std::istringstream lines(rep);
  int rows = 0;
  for (std::string l; std::getline(lines, l);)
    for (int c = 0; c < kNumCategories; ++c)
      if (l.rfind(std::string("  ") + category_name(Category(c)) + " ", 0) == 0) {
        ++rows;
        EXPECT_NE(l.find(" " + mib(m.peak_category[size_t(c)]) + " MiB   predicted "), std::string::npos) << l;
        EXPECT_NE(l.find(" " + mib(m.whole_step->peak[size_t(c)]) + " MiB", l.find("predicted")), std::string::npos) << l;
      }
  EXPECT_GE(rows, 8) << rep;
  EXPECT_NE(rep.find("predicted by a dry run of the whole step"), std::string::npos) << rep;
  EXPECT_NE(rep.find("  whole step: predicted = measured, to the byte\n"), std::string::npos) << rep;
  EXPECT_NE(rep.find("  outside the allocator: " + mib(*m.untracked_heap) +
                     " MiB (oneDNN primitive cache and scratchpad, runtime)\n"),
            std::string::npos)
      << rep;
  nlohmann::json j = report_json(r->in);
  EXPECT_EQ(j.at("whole_step").get<std::string>(), "predicted = measured, to the byte");
  EXPECT_EQ(j.at("peak_total_bytes_predicted").get<size_t>(), m.whole_step->peak_total);
  EXPECT_EQ(j.at("category_peak_bytes_predicted").at("optimizer").get<size_t>(),
            m.whole_step->peak[size_t(Category::OptimizerState)]);
  EXPECT_EQ(j.at("untracked_heap_bytes").get<size_t>(), *m.untracked_heap);

  // A difference is said, category by category, in bytes.
  ReportInput off = r->in;
  off.measure.whole_step->peak[size_t(Category::Gradient)] += 128;
  off.measure.whole_step->peak_total -= 64;
  EXPECT_NE(memory_report(off).find("  whole step: predicted - measured: gradient +128 B, total -64 B\n"),
            std::string::npos)
      << memory_report(off);
  // Without a prediction (a measure made outside Trainer::run), the measured column alone.
  ReportInput bare = r->in;
  bare.measure.whole_step.reset();
  bare.measure.untracked_heap.reset();
  const std::string b = memory_report(bare);
  EXPECT_EQ(b.find("whole step:"), std::string::npos) << b;
  EXPECT_EQ(b.find("outside the allocator"), std::string::npos) << b;
  EXPECT_EQ(between(b, "bytes per category", "activation peak of one step").find("predicted"), std::string::npos) << b;
  EXPECT_FALSE(report_json(bare).contains("whole_step"));
}

// A plan (a schedule and a policy per block, as the optimal planner gives): report_input carries them,
// and the report's activation prediction prices that plan, equal to the measurement.
TEST(Report, ReportInputOfAPlanPricesThePlan) {
  TrainOptions o = small_opts("none");
  o.schedule = make_schedule(parse_strategy("segments:1,3", 4, false), 4);
  o.block_policy = {"selective", "none", "selective", "none"};
  Trainer t(o);
  const TrainSummary s = t.run();
  const ReportInput in = report_input(t, s);
  EXPECT_EQ(in.block_policy.size(), 4u);
  EXPECT_EQ(in.policy_label, "per block: selective none selective none");
  const nlohmann::json j = report_json(in);
  EXPECT_EQ(j.at("predicted_activation_bytes").get<size_t>(), s.measure.peak_activation);
  EXPECT_EQ(j.at("predicted_forward_end_bytes").get<size_t>(), s.measure.forward_end);
  EXPECT_EQ(j.at("whole_step").get<std::string>(), "predicted = measured, to the byte");
  const std::string rep = memory_report(in);
  EXPECT_NE(rep.find("(equal to the byte)"), std::string::npos) << rep;
  // The same run described without its plan (its strategy alone) is priced as something else.
  ReportInput plain = in;
  plain.schedule.reset();
  plain.block_policy.clear();
  EXPECT_NE(report_json(plain).at("predicted_activation_bytes").get<size_t>(), s.measure.peak_activation);
}
