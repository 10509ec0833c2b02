// The SVG pictures (viz/svg.h): both documents are well-formed XML with no scripts, every label is
// present and escaped, the axes cover every point and the geometry maps back to the data (markers at
// their values through the axis ticks, the timeline's stacked areas adding up category by category).
// With REMAT_SVG_OUT=DIR set, the frontier of the default model is also written to DIR/frontier.svg
// (scripts/check-svg.sh renders it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <regex>

#include "core/atomic_file.h"
#include "planner/optimal.h"
#include "planner/budget.h"
#include "viz/svg.h"
#include "train/svg_xml.h"

using namespace remat;
using svg_xml::Node;

namespace {

const std::string kNasty = "a<b & \"c\" 'd' > e";  // every character XML escapes

std::unique_ptr<Node> parse_ok(const std::string& doc) {
  std::unique_ptr<Node> root;
  try {
    root = svg_xml::parse(doc);
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
    return std::make_unique<Node>();
  }
  EXPECT_EQ(root->name, "svg");
  EXPECT_EQ(root->attr("xmlns"), "http://www.w3.org/2000/svg");
  return root;
}

// No script, no event handlers, no links out: a picture only.
void expect_inert(const Node& root) {
  std::vector<const Node*> bad;
  root.find([](const Node& n) {
    if (n.name == "script" || n.name == "foreignObject" || n.name == "a" || n.name == "image" || n.name == "use")
      return true;
    for (const auto& [k, v] : n.attrs)
      if (k.rfind("on", 0) == 0 || k.find("href") != std::string::npos || v.find("javascript:") != std::string::npos ||
          v.find("url(") != std::string::npos)
        return true;
    return false;
  }, bad);
  EXPECT_TRUE(bad.empty()) << (bad.empty() ? "" : "<" + bad[0]->name + ">");
}

// The centre of a point marker: its circle, or the centre of its diamond path.
std::pair<double, double> marker_centre(const Node& g) {
  if (const Node* c = g.child("circle")) return {c->num("cx"), c->num("cy")};
  const Node* p = g.child("path");
  if (!p) throw std::runtime_error("point without a marker");
  double x = 0, y = 0;
  int n = 0;
  for (const auto& cmd : svg_xml::path_commands(p->attr("d")))
    if (cmd.cmd == 'M' || cmd.cmd == 'L') x += cmd.args.at(0), y += cmd.args.at(1), ++n;
  return {x / n, y / n};
}

struct Rect {
  double x0, y0, x1, y1;
};
Rect plot_rect(const Node& root) {
  const auto plots = root.with_class("plot");
  if (plots.size() != 1) throw std::runtime_error("expected one plot frame");
  const Node& p = *plots[0];
  return {p.num("x"), p.num("y"), p.num("x") + p.num("width"), p.num("y") + p.num("height")};
}

// Tick values step by 1, 2 or 5 times a power of ten (in the axis' unit).
void expect_nice(const Node& root, const std::string& cls, double unit) {
  const auto ticks = root.with_class(cls);
  ASSERT_GE(ticks.size(), 3u) << cls;
  const double step = (ticks[1]->num("data-value") - ticks[0]->num("data-value")) / unit;
  const double mag = std::pow(10.0, std::floor(std::log10(step) + 1e-9));
  const double norm = step / mag;
  EXPECT_TRUE(std::abs(norm - 1) < 1e-6 || std::abs(norm - 2) < 1e-6 || std::abs(norm - 5) < 1e-6)
      << cls << " step " << step;
  for (size_t i = 1; i < ticks.size(); ++i) {
    EXPECT_NEAR((ticks[i]->num("data-value") - ticks[i - 1]->num("data-value")) / unit, step, step * 1e-6) << cls;
    EXPECT_NE(ticks[i]->all_text(), ticks[i - 1]->all_text()) << cls;  // labels distinct
  }
}

std::vector<SvgPoint> sample_points() {
  return {{3.0 * 1048576, 1.62, "all", SvgPoint::Kind::Textbook},
          {9.5 * 1048576, 1.31, "sqrt (2 segments)", SvgPoint::Kind::Textbook},
          {22.5 * 1048576, 1.0, "none", SvgPoint::Kind::Textbook},
          {22.5 * 1048576, 1.0, "store everything", SvgPoint::Kind::Frontier},
          {6.0 * 1048576, 1.40, kNasty, SvgPoint::Kind::Frontier},
          {3.0 * 1048576, 1.55, "least memory", SvgPoint::Kind::Frontier},
          {12.0 * 1048576, 1.12, "3 checkpoints", SvgPoint::Kind::Frontier},
          {12.0 * 1048576, 1.12, "chosen: <3 checkpoints & more>", SvgPoint::Kind::Chosen}};
}

TEST(Svg, XmlEscapeEscapesEverySpecialCharacter) {
  EXPECT_EQ(xml_escape(kNasty), "a&lt;b &amp; &quot;c&quot; &apos;d&apos; &gt; e");
  EXPECT_EQ(xml_escape("plain 1.25x"), "plain 1.25x");
  EXPECT_EQ(xml_escape(std::string("a\x01" "b")), "ab");  // not allowed in XML 1.0
}

TEST(Svg, FrontierIsWellFormedInertAndLabelled) {
  const std::vector<SvgPoint> pts = sample_points();
  const std::string doc = frontier_svg(pts, "frontier of <model> & co");
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
}

TEST(Svg, FrontierAxesCoverEveryPointAtItsValue) {
  const std::vector<SvgPoint> pts = sample_points();
  const auto root = parse_ok(frontier_svg(pts, "t"));
  const Rect r = plot_rect(*root);
  const svg_xml::AxisMap xm = svg_xml::axis_map(*root, true), ym = svg_xml::axis_map(*root, false);
  // The axes run exactly over the plot: first and last ticks on its edges.
  EXPECT_NEAR(xm.p0, r.x0, 0.01);
  EXPECT_NEAR(xm.p1, r.x1, 0.01);
  EXPECT_NEAR(ym.p0, r.y1, 0.01);
  EXPECT_NEAR(ym.p1, r.y0, 0.01);
  for (const Node* g : root->with_class("point")) {
    const double b = g->num("data-bytes"), o = g->num("data-overhead");
    EXPECT_GE(b, xm.v0);
    EXPECT_LE(b, xm.v1);
    EXPECT_GE(o, ym.v0);
    EXPECT_LE(o, ym.v1);
    const auto [cx, cy] = marker_centre(*g);
    EXPECT_NEAR(cx, xm.pixel(b), 0.02) << g->child("title")->text;
    EXPECT_NEAR(cy, ym.pixel(o), 0.02) << g->child("title")->text;
    EXPECT_TRUE(cx >= r.x0 && cx <= r.x1 && cy >= r.y0 && cy <= r.y1);
  }
  // Ticks 1-2-5, bytes in MiB here ("5 MiB"), times as "1.20x".
  expect_nice(*root, "xtick", 1048576.0);
  expect_nice(*root, "ytick", 1.0);
  for (const Node* t : root->with_class("xtick"))
    EXPECT_TRUE(std::regex_match(t->all_text(), std::regex("0|[0-9.]+ MiB"))) << t->all_text();
  for (const Node* t : root->with_class("ytick"))
    EXPECT_TRUE(std::regex_match(t->all_text(), std::regex("[0-9]+\\.[0-9]{2,}x"))) << t->all_text();
}

TEST(Svg, FrontierStaircaseIsParetoInAnyInputOrder) {
  std::vector<SvgPoint> pts = sample_points();
  pts.push_back({8.0 * 1048576, 1.45, "dominated", SvgPoint::Kind::Frontier});  // by 6 MiB at 1.40x
  pts.push_back({6.0 * 1048576, 1.41, "dominated too", SvgPoint::Kind::Frontier});
  std::mt19937 gen(3);
  std::shuffle(pts.begin(), pts.end(), gen);
  const auto root = parse_ok(frontier_svg(pts, "t"));
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
      EXPECT_GE(v, y - 1e-9);  // downwards in pixels: less time
      drops += v > y;
    }
    (cmds[i].cmd == 'H' ? x : y) = v;
  }
  EXPECT_EQ(drops, 3);  // four Pareto-optimal frontier points
  EXPECT_EQ(root->with_class("frontier").size(), 6u);  // the dominated ones still drawn
  // It starts at the least-memory frontier point and passes through every frontier marker.
  const svg_xml::AxisMap xm = svg_xml::axis_map(*root, true);
  EXPECT_NEAR(cmds[0].args[0], xm.pixel(3.0 * 1048576), 0.02);
}

TEST(Svg, LongLabelsAreCutVisiblyButWholeInTheTooltip) {
  std::string label = "chosen: ";
  for (int i = 0; i < 30; ++i) label += "block " + std::to_string(i) + " \u00e9 ";  // multi-byte characters too
  const auto root = parse_ok(frontier_svg({{5e6, 1.1, label, SvgPoint::Kind::Chosen}}, "t"));
  const auto shown = root->with_class("label");
  ASSERT_EQ(shown.size(), 1u);
  const std::string text = shown[0]->all_text();
  const std::string ellipsis = "\u2026";
  ASSERT_GT(text.size(), ellipsis.size());
  EXPECT_LT(text.size(), label.size() / 2);
  EXPECT_EQ(text.substr(text.size() - ellipsis.size()), ellipsis);
  EXPECT_EQ(label.rfind(text.substr(0, text.size() - ellipsis.size()), 0), 0u);  // a prefix, whole characters
  EXPECT_EQ(root->with_class("chosen")[0]->child("title")->text.rfind(label + ":", 0), 0u);
  // Inside the plot.
  const Rect r = plot_rect(*root);
  const double x = shown[0]->num("x");
  EXPECT_TRUE(x > r.x0 && x < r.x1);
}

TEST(Svg, FrontierOfNoPointsOrOnePointIsStillAPicture) {
  for (const auto& pts : {std::vector<SvgPoint>{}, std::vector<SvgPoint>{{1000, 1.0, "one", SvgPoint::Kind::Chosen}}}) {
    const auto root = parse_ok(frontier_svg(pts, "t"));
    EXPECT_GE(root->with_class("xtick").size(), 2u);
    EXPECT_GE(root->with_class("ytick").size(), 2u);
    const svg_xml::AxisMap xm = svg_xml::axis_map(*root, true), ym = svg_xml::axis_map(*root, false);
    for (const SvgPoint& q : pts) {
      EXPECT_TRUE(q.bytes >= xm.v0 && q.bytes <= xm.v1);
      EXPECT_TRUE(q.overhead >= ym.v0 && q.overhead <= ym.v1);
    }
  }
}

// The frontier of the default model (remat's "shakespeare" preset, batch 8), built by the optimal
// planner with the textbook strategies and a chosen plan beside it, as `remat plan` prices them.
TEST(Svg, FrontierOfTheDefaultModel) {
  const ModelConfig cfg = preset("shakespeare");
  const Candidates c = make_candidates(cfg, 8, cfg.T);
  const int L = int(cfg.L);
  const auto flops = [](const planner::ComputePrediction& p) { return p.fwd + p.bwd + p.recompute; };
  const double base = flops(planner::predict_compute(c.problem.traces[0], make_schedule(parse_strategy("none", L, false), L)));
  std::vector<SvgPoint> pts;
  const std::vector<planner::ChainPlan> frontier = planner::optimal_frontier(c.problem);
  ASSERT_GE(frontier.size(), 2u);
  for (const planner::ChainPlan& p : frontier)
    pts.push_back({double(p.memory.peak_activation), flops(p.compute) / base, p.summary(), SvgPoint::Kind::Frontier});
  for (const char* s : {"none", "all", "block", "sqrt"}) {
    const Schedule sch = make_schedule(parse_strategy(s, L, false), L);
    pts.push_back({double(planner::simulate_memory(c.problem.traces[0], sch).peak_activation),
                   flops(planner::predict_compute(c.problem.traces[0], sch)) / base, s, SvgPoint::Kind::Textbook});
  }
  for (size_t p = 1; p < c.problem.policy_names.size(); ++p) {  // store everything under each policy
    const Schedule sch = make_schedule(parse_strategy("none", L, false), L);
    pts.push_back({double(planner::simulate_memory(c.problem.traces[p], sch).peak_activation),
                   flops(planner::predict_compute(c.problem.traces[p], sch)) / base, c.problem.policy_names[p],
                   SvgPoint::Kind::Textbook});
  }
  const size_t budget = (frontier.front().memory.peak_activation + frontier.back().memory.peak_activation) / 2;
  const planner::ChainPlan chosen = planner::optimal_plan(c.problem, budget);
  pts.push_back({double(chosen.memory.peak_activation), flops(chosen.compute) / base,
                 "chosen for " + format_bytes(budget) + ": " + chosen.summary(), SvgPoint::Kind::Chosen});

  const std::string doc = frontier_svg(pts, "Optimal frontier: " + cfg.describe() + ", batch 8 (activation peak)");
  const auto root = parse_ok(doc);
  expect_inert(*root);
  EXPECT_EQ(root->with_class("point").size(), pts.size());
  const svg_xml::AxisMap xm = svg_xml::axis_map(*root, true), ym = svg_xml::axis_map(*root, false);
  for (const SvgPoint& q : pts) {
    EXPECT_TRUE(q.bytes >= xm.v0 && q.bytes <= xm.v1) << q.label;
    EXPECT_TRUE(q.overhead >= ym.v0 && q.overhead <= ym.v1) << q.label;
  }
  if (const char* dir = std::getenv("REMAT_SVG_OUT")) write_file_atomic(std::string(dir) + "/frontier.svg", doc);
}

// ---- timeline ---------------------------------------------------------------------------------------

std::vector<TimelineSample> random_samples(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::vector<TimelineSample> s;
  for (size_t i = 0; i < n; ++i) {
    TimelineSample t;
    t.event = i == 3 ? kNasty : "event " + std::to_string(i);
    t.phase = i < n / 2 ? TimelineSample::Phase::Forward
              : i % 3 ? TimelineSample::Phase::Backward
                      : TimelineSample::Phase::Recompute;
    for (int c = 0; c < kNumCategories; ++c)
      t.live[size_t(c)] = Category(c) == Category::Debug ? 0 : size_t(gen() % (3u << 20));
    s.push_back(t);
  }
  return s;
}

// Each stacked layer's path: its top edge left to right (n points), then its bottom edge back.
struct Layer {
  std::string category;
  std::vector<std::pair<double, double>> top, bottom;
};
std::vector<Layer> layers(const Node& root, size_t n) {
  std::vector<Layer> out;
  for (const Node* p : root.with_class("layer")) {
    Layer l{p->attr("data-category"), {}, {}};
    for (const auto& c : svg_xml::path_commands(p->attr("d"))) {
      if (c.cmd == 'Z') continue;
      auto& edge = l.top.size() < n ? l.top : l.bottom;
      edge.push_back({c.args.at(0), c.args.at(1)});
    }
    EXPECT_EQ(l.top.size(), n);
    EXPECT_EQ(l.bottom.size(), n);
    std::reverse(l.bottom.begin(), l.bottom.end());
    out.push_back(std::move(l));
  }
  return out;
}

// The stack's top edge at every event maps back, through the y ticks, to the sum of the categories
// drawn; each layer's thickness to its category's bytes; each layer sits on the one below.
void expect_stack_adds_up(const std::vector<TimelineSample>& s, bool persistent) {
  TimelineOptions o;
  o.persistent = persistent;
  o.title = "t";
  const auto root = parse_ok(timeline_svg(s, o));
  expect_inert(*root);
  const svg_xml::AxisMap ym = svg_xml::axis_map(*root, false);
  const double tol = std::abs(ym.value(0.011) - ym.value(0));  // coordinates carry 2 decimals
  const std::vector<Layer> ls = layers(*root, s.size());
  ASSERT_FALSE(ls.empty());
  // The layers drawn, bottom to top, are the categories the timeline stacks that hold bytes.
  std::vector<std::string> want;
  for (Category c : timeline_categories(persistent))
    if (std::any_of(s.begin(), s.end(), [&](const TimelineSample& t) { return t.live[size_t(c)] > 0; }))
      want.push_back(category_name(c));
  std::vector<std::string> got;
  for (const Layer& l : ls) got.push_back(l.category);
  EXPECT_EQ(got, want);
  for (size_t i = 0; i < s.size(); ++i) {
    size_t sum = 0;
    for (size_t k = 0; k < ls.size(); ++k) {
      size_t bytes = 0;
      for (int c = 0; c < kNumCategories; ++c)
        if (ls[k].category == category_name(Category(c))) bytes = s[i].live[size_t(c)];
      sum += bytes;
      EXPECT_NEAR(ym.value(ls[k].top[i].second) - ym.value(ls[k].bottom[i].second), double(bytes), 2 * tol);
      EXPECT_DOUBLE_EQ(ls[k].top[i].first, ls[k].bottom[i].first);
      if (k) EXPECT_DOUBLE_EQ(ls[k].bottom[i].second, ls[k - 1].top[i].second);
      else EXPECT_NEAR(ym.value(ls[k].bottom[i].second), 0.0, tol);
    }
    EXPECT_EQ(sum, timeline_top(s[i], persistent));
    EXPECT_NEAR(ym.value(ls.back().top[i].second), double(timeline_top(s[i], persistent)), tol) << "event " << i;
  }
  // The axis covers the highest stack.
  size_t top = 0;
  for (const auto& t : s) top = std::max(top, timeline_top(t, persistent));
  EXPECT_GE(ym.v1, double(top));
  EXPECT_EQ(ym.v0, 0.0);
}

TEST(Svg, TimelineStackTopIsTheSumOfItsCategories) {
  expect_stack_adds_up(random_samples(17, 1), false);
  expect_stack_adds_up(random_samples(5, 2), false);
  expect_stack_adds_up(random_samples(140, 3), false);  // ticks thinned, no event tags
}

TEST(Svg, TimelinePersistentBaseIsOptional) {
  const auto s = random_samples(12, 4);
  expect_stack_adds_up(s, true);
  TimelineOptions o;
  const auto off = parse_ok(timeline_svg(s, o));
  for (const Node* l : off->with_class("layer")) EXPECT_NE(l->attr("data-category"), category_name(Category::Parameter));
  // With the base, the top is every category but the debug copies (zero here): all live bytes.
  for (const auto& t : s) {
    size_t total = 0;
    for (size_t v : t.live) total += v;
    EXPECT_EQ(timeline_top(t, true), total);
  }
}

TEST(Svg, TimelineOfNoEventsOrNoActivationsIsStillAPicture) {
  TimelineOptions o;
  const auto none = parse_ok(timeline_svg({}, o));
  EXPECT_TRUE(none->with_class("layer").empty());
  std::vector<TimelineSample> idle(3);
  idle[1].live[size_t(Category::Workspace)] = 4096;
  const auto root = parse_ok(timeline_svg(idle, o));
  ASSERT_EQ(root->with_class("peak").size(), 1u);
  EXPECT_EQ(root->with_class("peak")[0]->attr("data-bytes"), "0");
  EXPECT_EQ(root->with_class("layer").size(), 1u);
}

TEST(Svg, TimelinePeakMarkerIsTheActivationPeak) {
  auto s = random_samples(20, 5);
  s[13].live[size_t(Category::Recompute)] = size_t(40) << 20;  // the peak, in the recompute phase
  size_t want = 0;
  for (int c = 0; c < kNumCategories; ++c)
    if (is_activation(Category(c))) want += s[13].live[size_t(c)];
  TimelineOptions o;
  const auto root = parse_ok(timeline_svg(s, o));
  const auto peak = root->with_class("peak");
  ASSERT_EQ(peak.size(), 1u);
  EXPECT_EQ(peak[0]->attr("data-bytes"), std::to_string(want));
  EXPECT_EQ(peak[0]->attr("data-event"), "13");
  const auto label = peak[0]->with_class("label");
  ASSERT_EQ(label.size(), 1u);
  EXPECT_NE(label[0]->all_text().find(format_bytes(want)), std::string::npos) << label[0]->all_text();
  // The dot sits on the top of the activation layers at that event.
  const svg_xml::AxisMap ym = svg_xml::axis_map(*root, false);
  EXPECT_NEAR(ym.value(peak[0]->child("circle")->num("cy")), double(want), std::abs(ym.value(0.011) - ym.value(0)));
}

TEST(Svg, TimelineEventsAndPhasesAreLabelledAndEscaped) {
  const auto s = random_samples(10, 6);
  TimelineOptions o;
  o.title = "step of <" + kNasty + ">";
  const std::string doc = timeline_svg(s, o);
  EXPECT_EQ(doc.find(kNasty), std::string::npos);  // only escaped
  const auto root = parse_ok(doc);
  const auto titles = root->with_class("title");
  ASSERT_EQ(titles.size(), 1u);
  EXPECT_EQ(titles[0]->all_text(), o.title);
  const auto events = root->with_class("event");
  ASSERT_EQ(events.size(), s.size());
  for (size_t i = 0; i < s.size(); ++i)
    EXPECT_EQ(events[i]->child("title")->text.rfind(std::to_string(i) + ": " + s[i].event + "\n", 0), 0u) << i;
  // One shaded band per run of a phase, covering the plot from left to right without gaps.
  const auto bands = root->with_class("phase");
  const Rect r = plot_rect(*root);
  ASSERT_FALSE(bands.empty());
  double x = r.x0;
  size_t runs = 1;
  for (size_t i = 1; i < s.size(); ++i) runs += s[i].phase != s[i - 1].phase;
  EXPECT_EQ(bands.size(), runs);
  for (const Node* b : bands) {
    EXPECT_NEAR(b->num("x"), x, 0.02);
    x = b->num("x") + b->num("width");
  }
  EXPECT_NEAR(x, r.x1, 0.05);
}

}  // namespace
