// The frontier picture (viz/svg.h): a well-formed XML document with no scripts, every label present
// and escaped, the axes covering every point and saying what they plot, the geometry mapping back to
// the data (markers at their values through the axis ticks), the budget drawn, no text overlapping
// another or leaving the canvas, and no marker hiding another. The timeline's tests are in
// test_svg_timeline.cpp. With REMAT_SVG_OUT=DIR set, the frontier of the default model is also
// written to DIR/frontier.svg (scripts/check-svg.sh renders it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <regex>

#include "core/atomic_file.h"
#include "planner/budget.h"
#include "planner/frontier.h"
#include "train/svg_checks.h"
#include "train/svg_geometry.h"
#include "viz/svg.h"

using namespace remat;
using svg_checks::expect_inert;
using svg_checks::kNasty;
using svg_checks::parse_ok;
using svg_xml::Node;

namespace {

constexpr double MiB = 1048576.0;

FrontierOptions titled(const std::string& title) {
  FrontierOptions o;
  o.title = title;
  return o;
}

std::vector<SvgPoint> sample_points() {
  return {{3.0 * MiB, 1.62, "all", SvgPoint::Kind::Textbook},
          {9.5 * MiB, 1.31, "sqrt (2 segments)", SvgPoint::Kind::Textbook},
          {22.5 * MiB, 1.0, "none", SvgPoint::Kind::Textbook},
          {22.5 * MiB, 1.0, "store everything", SvgPoint::Kind::Frontier},
          {6.0 * MiB, 1.40, kNasty, SvgPoint::Kind::Frontier},
          {3.0 * MiB, 1.55, "least memory", SvgPoint::Kind::Frontier},
          {12.0 * MiB, 1.12, "3 checkpoints", SvgPoint::Kind::Frontier},
          {12.0 * MiB, 1.12, "chosen: <3 checkpoints & more>", SvgPoint::Kind::Chosen}};
}

void expect_clean(const Node& root) {
  for (const std::string& p : svg_geometry::text_problems(root)) ADD_FAILURE() << p;
  for (const std::string& p : svg_geometry::hidden_markers(root)) ADD_FAILURE() << p;
}

TEST(Svg, XmlEscapeEscapesEverySpecialCharacter) {
  EXPECT_EQ(xml_escape(kNasty), "a&lt;b &amp; &quot;c&quot; &apos;d&apos; &gt; e");
  EXPECT_EQ(xml_escape("plain 1.25x"), "plain 1.25x");
  EXPECT_EQ(xml_escape(std::string("a\x01" "b")), "ab");  // not allowed in XML 1.0
}

TEST(Svg, FrontierIsWellFormedInertAndLabelled) {
  const std::vector<SvgPoint> pts = sample_points();
  const std::string doc = frontier_svg(pts, titled("frontier of <model> & co"));
  EXPECT_EQ(doc.find("<script"), std::string::npos);
  const auto root = parse_ok(doc);
  expect_inert(*root);
  EXPECT_EQ(root->attr("width"), "900");
  EXPECT_EQ(root->attr("height"), "560");
  // The title, escaped in the file, reads back as given.
  const auto titles = root->with_class("title");
  ASSERT_EQ(titles.size(), 1u);
  EXPECT_EQ(titles[0]->all_text(), "frontier of <model> & co");
  // Every point is a marker whose tooltip carries its label; textbook and chosen labels are visible.
  const auto groups = root->with_class("point");
  ASSERT_EQ(groups.size(), pts.size());
  std::vector<std::string> visible;
  for (const Node* t : root->with_class("label")) visible.push_back(t->all_text());
  for (const SvgPoint& q : pts) {
    const bool tooltip = std::any_of(groups.begin(), groups.end(), [&](const Node* g) {
      const Node* t = g->child("title");
      return t && t->text.rfind(q.label + ":", 0) == 0;
    });
    EXPECT_TRUE(tooltip) << q.label;
    if (q.kind != SvgPoint::Kind::Frontier) {
      EXPECT_NE(std::find(visible.begin(), visible.end(), q.label), visible.end()) << q.label;
    }
  }
  EXPECT_EQ(root->with_class("chosen").size(), 1u);
  EXPECT_EQ(root->with_class("textbook").size(), 3u);
  EXPECT_EQ(root->with_class("staircase").size(), 1u);
  EXPECT_EQ(root->with_class("legend").size(), 1u);
  expect_clean(*root);
}

TEST(Svg, FrontierAxesCoverEveryPointAtItsValue) {
  const std::vector<SvgPoint> pts = sample_points();
  const auto root = parse_ok(frontier_svg(pts, titled("t")));
  const svg_checks::Rect r = svg_checks::plot_rect(*root);
  const svg_xml::AxisMap xm = svg_xml::axis_map(*root, true), ym = svg_xml::axis_map(*root, false);
  // The axes run exactly over the plot: first and last ticks on its edges.
  EXPECT_NEAR(xm.p0, r.x0, 0.01);
  EXPECT_NEAR(xm.p1, r.x1, 0.01);
  EXPECT_NEAR(ym.p0, r.y1, 0.01);
  EXPECT_NEAR(ym.p1, r.y0, 0.01);
  for (const svg_geometry::MarkerInk& m : svg_geometry::markers(*root)) {
    const auto it = std::find_if(pts.begin(), pts.end(), [&](const SvgPoint& q) { return m.label.rfind(q.label + ":", 0) == 0; });
    ASSERT_NE(it, pts.end()) << m.label;
    EXPECT_TRUE(it->bytes >= xm.v0 && it->bytes <= xm.v1 && it->cost >= ym.v0 && it->cost <= ym.v1) << m.label;
    EXPECT_NEAR(m.x, xm.pixel(it->bytes), 0.02) << m.label;
    EXPECT_NEAR(m.y, ym.pixel(it->cost), 0.02) << m.label;
    EXPECT_TRUE(m.x >= r.x0 && m.x <= r.x1 && m.y >= r.y0 && m.y <= r.y1);
  }
  // Ticks 1-2-5, bytes in MiB here ("5 MiB"), ratios as "1.20x".
  svg_checks::expect_nice(*root, "xtick", MiB);
  svg_checks::expect_nice(*root, "ytick", 1.0);
  for (const Node* t : root->with_class("xtick"))
    EXPECT_TRUE(std::regex_match(t->all_text(), std::regex("0|[0-9.]+ MiB"))) << t->all_text();
  for (const Node* t : root->with_class("ytick"))
    EXPECT_TRUE(std::regex_match(t->all_text(), std::regex("[0-9]+\\.[0-9]{2,}x"))) << t->all_text();
}

// The y axis' title is the caller's, word for word (it says what the cost is), and its ticks are in
// that cost's unit: "1.25x" for a ratio, "120 ms" for seconds, each point at its value.
TEST(Svg, FrontierAxesSayWhatTheyPlot) {
  FrontierOptions o = titled("t");
  o.cost_title = "predicted FLOPs / store-everything's (naive attention)";
  o.bytes_title = "predicted whole-step peak";
  auto root = parse_ok(frontier_svg(sample_points(), o));
  std::vector<std::string> axis;
  for (const Node* t : root->with_class("axis-title")) axis.push_back(t->all_text());
  EXPECT_EQ(axis, (std::vector<std::string>{o.bytes_title, o.cost_title}));
  // Seconds of one optimizer step: 80 to 130 ms.
  o.cost = FrontierOptions::Cost::Seconds;
  o.cost_title = "predicted seconds of one optimizer step (calibrated)";
  std::vector<SvgPoint> pts = sample_points();
  for (SvgPoint& q : pts) q.cost *= 0.08;
  root = parse_ok(frontier_svg(pts, o));
  axis.clear();
  for (const Node* t : root->with_class("axis-title")) axis.push_back(t->all_text());
  EXPECT_EQ(axis, (std::vector<std::string>{o.bytes_title, o.cost_title}));
  for (const Node* t : root->with_class("ytick"))
    EXPECT_TRUE(std::regex_match(t->all_text(), std::regex("0|[0-9]+ ms"))) << t->all_text();
  const svg_xml::AxisMap ym = svg_xml::axis_map(*root, false);
  const auto ms = svg_geometry::markers(*root);
  const auto chosen = std::find_if(ms.begin(), ms.end(), [](const auto& m) { return m.kind == "chosen"; });
  ASSERT_NE(chosen, ms.end());
  EXPECT_NEAR(ym.value(chosen->y), 1.12 * 0.08, 1e-4);
  expect_clean(*root);
}

TEST(Svg, FrontierStaircaseIsParetoInAnyInputOrder) {
  std::vector<SvgPoint> pts = sample_points();
  pts.push_back({8.0 * MiB, 1.45, "dominated", SvgPoint::Kind::Frontier});  // by 6 MiB at 1.40x
  pts.push_back({6.0 * MiB, 1.41, "dominated too", SvgPoint::Kind::Frontier});
  std::mt19937 gen(3);
  std::shuffle(pts.begin(), pts.end(), gen);
  const auto root = parse_ok(frontier_svg(pts, titled("t")));
  const auto st = root->with_class("staircase");
  ASSERT_EQ(st.size(), 1u);
  const auto cmds = svg_xml::path_commands(st[0]->attr("d"));
  ASSERT_FALSE(cmds.empty());
  ASSERT_EQ(cmds[0].cmd, 'M');
  double x = cmds[0].args[0], y = cmds[0].args[1];
  int drops = 0;
  for (size_t i = 1; i < cmds.size(); ++i) {
    ASSERT_TRUE(cmds[i].cmd == 'H' || cmds[i].cmd == 'V') << cmds[i].cmd;
    const double v = cmds[i].args.at(0);
    if (cmds[i].cmd == 'H') {
      EXPECT_GE(v, x - 1e-9);  // rightwards: more memory
    } else {
      EXPECT_GE(v, y - 1e-9);  // downwards in pixels: less cost
      drops += v > y;
    }
    (cmds[i].cmd == 'H' ? x : y) = v;
  }
  EXPECT_EQ(drops, 3);  // four Pareto-optimal frontier points
  EXPECT_EQ(root->with_class("frontier").size(), 6u);  // the dominated ones still drawn
  const svg_xml::AxisMap xm = svg_xml::axis_map(*root, true);
  EXPECT_NEAR(cmds[0].args[0], xm.pixel(3.0 * MiB), 0.02);  // from the least-memory frontier point
}

// A label too long for two lines of the plot is cut at a whole character with an ellipsis; the
// tooltip has all of it.
TEST(Svg, LongLabelsAreWrappedThenCutButWholeInTheTooltip) {
  std::string label = "chosen: ";
  for (int i = 0; i < 30; ++i) label += "block " + std::to_string(i) + " \u00e9 ";  // multi-byte characters too
  const auto root = parse_ok(frontier_svg({{5e6, 1.1, label, SvgPoint::Kind::Chosen}}, titled("t")));
  const auto shown = root->with_class("label");
  ASSERT_EQ(shown.size(), 1u);
  EXPECT_EQ(shown[0]->all("tspan").size(), 2u);  // two lines
  const std::string text = shown[0]->raw_text();
  const std::string ellipsis = "\u2026";
  ASSERT_GT(text.size(), ellipsis.size());
  EXPECT_LT(text.size(), label.size());
  EXPECT_EQ(text.substr(text.size() - ellipsis.size()), ellipsis);
  EXPECT_EQ(label.rfind(text.substr(0, text.size() - ellipsis.size()), 0), 0u);  // a prefix, whole characters
  EXPECT_EQ(root->with_class("chosen")[0]->child("title")->text.rfind(label + ":", 0), 0u);
  expect_clean(*root);
}

TEST(Svg, FrontierOfNoPointsOrOnePointIsStillAPicture) {
  for (const auto& pts : {std::vector<SvgPoint>{}, std::vector<SvgPoint>{{1000, 1.0, "one", SvgPoint::Kind::Chosen}}}) {
    const auto root = parse_ok(frontier_svg(pts, titled("t")));
    EXPECT_GE(root->with_class("xtick").size(), 2u);
    EXPECT_GE(root->with_class("ytick").size(), 2u);
    const svg_xml::AxisMap xm = svg_xml::axis_map(*root, true), ym = svg_xml::axis_map(*root, false);
    for (const SvgPoint& q : pts) {
      EXPECT_TRUE(q.bytes >= xm.v0 && q.bytes <= xm.v1);
      EXPECT_TRUE(q.cost >= ym.v0 && q.cost <= ym.v1);
    }
  }
}

// The budget is a vertical line at its bytes, named in a label; a budget no plan meets is drawn too,
// left of every point, with the least whole-step peak marked.
TEST(Svg, FrontierDrawsTheBudgetMetOrNot) {
  FrontierOptions o = titled("t");
  o.budget = 13.0 * MiB;
  auto root = parse_ok(frontier_svg(sample_points(), o));
  auto lines = root->with_class("budget");
  ASSERT_EQ(lines.size(), 1u);
  svg_xml::AxisMap xm = svg_xml::axis_map(*root, true);
  EXPECT_NEAR(xm.value(lines[0]->num("x1")), 13.0 * MiB, 2e-3 * MiB);
  EXPECT_EQ(lines[0]->num("x1"), lines[0]->num("x2"));
  std::vector<std::string> labels;
  for (const Node* t : root->with_class("label")) labels.push_back(t->all_text());
  EXPECT_NE(std::find(labels.begin(), labels.end(), "budget 13.00 MiB"), labels.end());
  expect_clean(*root);

  std::vector<SvgPoint> pts = sample_points();
  pts.erase(std::remove_if(pts.begin(), pts.end(), [](const SvgPoint& q) { return q.kind == SvgPoint::Kind::Chosen; }),
            pts.end());
  pts.push_back({3.0 * MiB, 1.55, "least whole-step peak 3.00 MiB: least memory", SvgPoint::Kind::Least});
  o.budget = 1.0 * MiB;
  o.budget_met = false;
  root = parse_ok(frontier_svg(pts, o));
  lines = root->with_class("budget");
  ASSERT_EQ(lines.size(), 1u);
  xm = svg_xml::axis_map(*root, true);
  EXPECT_NEAR(xm.value(lines[0]->num("x1")), 1.0 * MiB, 2e-3 * MiB);
  EXPECT_GE(xm.value(lines[0]->num("x1")), xm.v0);  // inside the axis
  ASSERT_EQ(root->with_class("least").size(), 1u);
  labels.clear();
  for (const Node* t : root->with_class("label")) labels.push_back(t->all_text());
  for (const char* want : {"budget 1.00 MiB: no plan fits", "least whole-step peak 3.00 MiB: least memory"})
    EXPECT_NE(std::find(labels.begin(), labels.end(), want), labels.end()) << want;
  expect_clean(*root);
}

// Two textbook strategies at the same bytes and cost (selective and flash can be): the second is a
// ring around the first, both labelled, neither hidden; so is a textbook strategy on a frontier point.
TEST(Svg, CoincidentMarkersAreAllVisible) {
  std::vector<SvgPoint> pts = sample_points();
  pts.push_back({20.0 * MiB, 1.05, "selective", SvgPoint::Kind::Textbook});
  pts.push_back({20.01 * MiB, 1.05, "flash", SvgPoint::Kind::Textbook});
  pts.push_back({6.0 * MiB, 1.40, "uniform:3", SvgPoint::Kind::Textbook});  // on a frontier point
  const auto root = parse_ok(frontier_svg(pts, titled("t")));
  EXPECT_TRUE(svg_geometry::hidden_markers(*root).empty());
  std::vector<std::string> labels;
  for (const Node* t : root->with_class("label")) labels.push_back(t->all_text());
  for (const char* want : {"selective", "flash", "uniform:3"})
    EXPECT_NE(std::find(labels.begin(), labels.end(), want), labels.end()) << want;
  expect_clean(*root);
}

// Many textbook points and a long title: every label still finds room, none overlaps another or
// leaves the canvas, and the title is whole.
TEST(Svg, CrowdedFrontierKeepsEveryTextApartAndInside) {
  std::vector<SvgPoint> pts = sample_points();
  for (int i = 0; i < 12; ++i)
    pts.push_back({(14.0 + 0.3 * i) * MiB, 1.08 + 0.004 * i, "textbook strategy " + std::to_string(i),
                   SvgPoint::Kind::Textbook});
  for (int i = 1; i <= 40; ++i)
    pts.push_back({(3.0 + 0.45 * i) * MiB, 1.55 - 0.011 * i, std::to_string(i) + " checkpoints, " + std::to_string(2 * i) +
                   " block recomputes, selective on 4 blocks, norms on 2 blocks", SvgPoint::Kind::Frontier});
  std::string title = "remat plan:";
  for (int i = 0; i < 30; ++i) title += " word" + std::to_string(i);
  FrontierOptions o = titled(title);
  o.budget = 13.5 * MiB;
  const auto root = parse_ok(frontier_svg(pts, o));
  EXPECT_EQ(root->with_class("title")[0]->raw_text(), title);
  expect_clean(*root);
}

// The frontier of a 4-layer model (the reviewer's), built as `remat plan` builds it: the whole-step
// frontier, the textbook strategies and a chosen plan, every text apart and inside.
TEST(Svg, FrontierOfAFourLayerModel) {
  ModelConfig cfg = preset("shakespeare");
  cfg.L = 4;
  const PlanTarget t{cfg, 8, 8, cfg.T, 0, false, std::nullopt};
  const std::vector<KernelPlans> kernels = plan_kernels(t);
  const std::vector<StepPlan> front = step_frontier(t, kernels);
  ASSERT_GE(front.size(), 3u);
  const Candidates& c = kernels.front().candidates;
  const int L = int(cfg.L);
  const StepPlan none = price_strategy(c, parse_strategy("none", L, false), "none", t);
  std::vector<SvgPoint> pts;
  for (const StepPlan& p : front)
    pts.push_back({double(p.step.peak_total), plan_cost(p) / plan_cost(none), p.summary, SvgPoint::Kind::Frontier});
  for (const char* s : {"none", "sqrt", "block"}) {
    const StepPlan p = price_strategy(c, parse_strategy(s, L, false), "none", t);
    pts.push_back({double(p.step.peak_total), plan_cost(p) / plan_cost(none), s, SvgPoint::Kind::Textbook});
  }
  for (const char* policy : {"selective", "gelu"}) {
    const StepPlan p = price_strategy(c, parse_strategy("none", L, false), policy, t);
    pts.push_back({double(p.step.peak_total), plan_cost(p) / plan_cost(none), policy, SvgPoint::Kind::Textbook});
  }
  const size_t budget = size_t(28) << 20;
  const StepPlan chosen = plan_for_budget(t, budget, kernels);
  pts.push_back({double(chosen.step.peak_total), plan_cost(chosen) / plan_cost(none), "chosen: " + chosen.summary,
                 SvgPoint::Kind::Chosen});
  FrontierOptions o = titled("remat plan: " + cfg.describe() + ", B=8 (micro-batch 8), T=" + std::to_string(cfg.T));
  o.budget = double(budget);
  const std::string doc = frontier_svg(pts, o);
  const auto root = parse_ok(doc);
  expect_inert(*root);
  EXPECT_EQ(root->with_class("point").size(), pts.size());
  expect_clean(*root);
  if (const char* dir = std::getenv("REMAT_SVG_OUT")) write_file_atomic(std::string(dir) + "/frontier.svg", doc);
}

}  // namespace
