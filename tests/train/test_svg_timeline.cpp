// The timeline picture (viz/svg.h): well-formed and inert, the stacked areas adding up category by
// category through the y ticks, an event's highest moment drawn as a point of its own so that the top
// of the stack is the step's peak, the activation peak marked, phases shaded in order, the title
// whole however long, and no text overlapping another or leaving the canvas.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "train/svg_checks.h"
#include "train/svg_geometry.h"
#include "viz/svg.h"

using namespace remat;
using svg_checks::expect_inert;
using svg_checks::kNasty;
using svg_checks::parse_ok;
using svg_xml::Node;

namespace {

using Live = std::array<size_t, kNumCategories>;

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

// Each stacked layer's path: its top edge left to right, then its bottom edge back, as many points each.
struct Layer {
  std::string category;
  std::vector<std::pair<double, double>> top, bottom;
};
std::vector<Layer> layers(const Node& root) {
  std::vector<Layer> out;
  for (const Node* p : root.with_class("layer")) {
    Layer l{p->attr("data-category"), {}, {}};
    std::vector<std::pair<double, double>> all;
    for (const auto& c : svg_xml::path_commands(p->attr("d")))
      if (c.cmd != 'Z') all.push_back({c.args.at(0), c.args.at(1)});
    EXPECT_EQ(all.size() % 2, 0u);
    l.top.assign(all.begin(), all.begin() + long(all.size() / 2));
    l.bottom.assign(all.begin() + long(all.size() / 2), all.end());
    std::reverse(l.bottom.begin(), l.bottom.end());
    out.push_back(std::move(l));
  }
  return out;
}

// The points the stack is drawn through: each event's highest moment when above its end, then its end.
std::vector<const Live*> stack_points(const std::vector<TimelineSample>& s, bool persistent) {
  std::vector<const Live*> out;
  for (const TimelineSample& t : s) {
    if (t.high && timeline_top(*t.high, persistent) > timeline_top(t.live, persistent)) out.push_back(&*t.high);
    out.push_back(&t.live);
  }
  return out;
}

// The stack's top edge at every point maps back, through the y ticks, to the sum of the categories
// drawn; each layer's thickness to its category's bytes; each layer sits on the one below; the top
// mark is the highest of them.
void expect_stack_adds_up(const std::vector<TimelineSample>& s, bool persistent) {
  TimelineOptions o;
  o.persistent = persistent;
  o.title = "t";
  const auto root = parse_ok(timeline_svg(s, o));
  expect_inert(*root);
  const svg_xml::AxisMap ym = svg_xml::axis_map(*root, false);
  const double tol = std::abs(ym.value(0.011) - ym.value(0));  // coordinates carry 2 decimals
  const std::vector<Layer> ls = layers(*root);
  const std::vector<const Live*> pts = stack_points(s, persistent);
  ASSERT_FALSE(ls.empty());
  // The layers drawn, bottom to top, are the categories the timeline stacks that hold bytes.
  std::vector<std::string> want;
  for (Category c : timeline_categories(persistent))
    if (std::any_of(pts.begin(), pts.end(), [&](const Live* l) { return (*l)[size_t(c)] > 0; }))
      want.push_back(category_name(c));
  std::vector<std::string> got;
  for (const Layer& l : ls) got.push_back(l.category);
  EXPECT_EQ(got, want);
  size_t highest = 0;
  for (size_t i = 0; i < pts.size(); ++i) {
    size_t sum = 0;
    for (size_t k = 0; k < ls.size(); ++k) {
      ASSERT_EQ(ls[k].top.size(), pts.size());
      size_t bytes = 0;
      for (int c = 0; c < kNumCategories; ++c)
        if (ls[k].category == category_name(Category(c))) bytes = (*pts[i])[size_t(c)];
      sum += bytes;
      EXPECT_NEAR(ym.value(ls[k].top[i].second) - ym.value(ls[k].bottom[i].second), double(bytes), 2 * tol);
      EXPECT_DOUBLE_EQ(ls[k].top[i].first, ls[k].bottom[i].first);
      if (k) EXPECT_DOUBLE_EQ(ls[k].bottom[i].second, ls[k - 1].top[i].second);
      else EXPECT_NEAR(ym.value(ls[k].bottom[i].second), 0.0, tol);
    }
    EXPECT_EQ(sum, timeline_top(*pts[i], persistent));
    EXPECT_NEAR(ym.value(ls.back().top[i].second), double(sum), tol) << "point " << i;
    highest = std::max(highest, sum);
  }
  const auto top = root->with_class("top");
  ASSERT_EQ(top.size(), 1u);
  EXPECT_EQ(top[0]->attr("data-bytes"), std::to_string(highest));
  EXPECT_GE(ym.v1, double(highest));  // the axis covers the highest stack
  EXPECT_EQ(ym.v0, 0.0);
  for (const std::string& p : svg_geometry::text_problems(*root)) ADD_FAILURE() << p;
}

TEST(SvgTimeline, StackTopIsTheSumOfItsCategories) {
  expect_stack_adds_up(random_samples(17, 1), false);
  expect_stack_adds_up(random_samples(5, 2), false);
  expect_stack_adds_up(random_samples(140, 3), false);  // ticks thinned, no event tags
}

TEST(SvgTimeline, PersistentBaseIsOptional) {
  const auto s = random_samples(12, 4);
  expect_stack_adds_up(s, true);
  const auto off = parse_ok(timeline_svg(s, TimelineOptions{}));
  for (const Node* l : off->with_class("layer")) EXPECT_NE(l->attr("data-category"), category_name(Category::Parameter));
  // With the base, the top is every category but the debug copies (zero here): all live bytes.
  for (const auto& t : s) {
    size_t total = 0;
    for (size_t v : t.live) total += v;
    EXPECT_EQ(timeline_top(t, true), total);
  }
}

// An event whose transients and workspace come and go inside it: its highest moment is a point of
// its own, left of its end, and the top of the stack (the mark) is that moment's total, workspace
// drawn; without it the picture would stop short of the step's peak.
TEST(SvgTimeline, AnEventsHighestMomentIsDrawn) {
  auto s = random_samples(9, 7);
  for (auto& t : s) t.live[size_t(Category::Workspace)] = 0;
  Live high = s[5].live;
  high[size_t(Category::Workspace)] = size_t(30) << 20;
  high[size_t(Category::Activation)] += size_t(5) << 20;
  s[5].high = high;
  s[6].high = s[6].live;  // no higher than its end: not drawn apart
  expect_stack_adds_up(s, true);
  expect_stack_adds_up(s, false);
  TimelineOptions o;
  o.persistent = true;
  const auto root = parse_ok(timeline_svg(s, o));
  EXPECT_EQ(root->with_class("top")[0]->attr("data-bytes"), std::to_string(timeline_top(high, true)));
  EXPECT_EQ(root->with_class("top")[0]->attr("data-event"), "5");
  const auto ls = layers(*root);
  ASSERT_EQ(ls.front().top.size(), s.size() + 1);
  EXPECT_TRUE(std::any_of(ls.begin(), ls.end(), [](const Layer& l) { return l.category == "workspace"; }));
  // The moment sits between the previous event's end and its own.
  EXPECT_GT(ls.front().top[5].first, ls.front().top[4].first);
  EXPECT_LT(ls.front().top[5].first, ls.front().top[6].first);
}

TEST(SvgTimeline, OfNoEventsOrNoActivationsIsStillAPicture) {
  const auto none = parse_ok(timeline_svg({}, TimelineOptions{}));
  EXPECT_TRUE(none->with_class("layer").empty());
  std::vector<TimelineSample> idle(3);
  idle[1].live[size_t(Category::Workspace)] = 4096;
  const auto root = parse_ok(timeline_svg(idle, TimelineOptions{}));
  ASSERT_EQ(root->with_class("peak").size(), 1u);
  EXPECT_EQ(root->with_class("peak")[0]->attr("data-bytes"), "0");
  EXPECT_EQ(root->with_class("layer").size(), 1u);
}

TEST(SvgTimeline, PeakMarkerIsTheActivationPeak) {
  auto s = random_samples(20, 5);
  s[13].live[size_t(Category::Recompute)] = size_t(40) << 20;  // the peak, in the recompute phase
  size_t want = 0;
  for (int c = 0; c < kNumCategories; ++c)
    if (is_activation(Category(c))) want += s[13].live[size_t(c)];
  const auto root = parse_ok(timeline_svg(s, TimelineOptions{}));
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

TEST(SvgTimeline, EventsAndPhasesAreLabelledAndEscaped) {
  auto s = random_samples(10, 6);
  s.back().phase = TimelineSample::Phase::Optimizer;
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
  const svg_checks::Rect r = svg_checks::plot_rect(*root);
  ASSERT_FALSE(bands.empty());
  EXPECT_EQ(bands.back()->attr("data-phase"), "optimizer");
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

// A title longer than the canvas is wide (a plan file's path and summary) is wrapped, never cut: its
// lines join to the whole title, inside the canvas, and the plot starts below them.
TEST(SvgTimeline, LongTitleIsWrappedWhole) {
  TimelineOptions o;
  o.persistent = true;
  o.title = "Live memory of one step: gpt2 L=4 C=128 NH=4 T=128 V=256, the plan /tmp/some/long/dir/plan.json (3 "
            "checkpoints, 3 block recomputes, selective on 2 blocks, norms on 1 block, gelu on 1 block), micro-batch 8";
  const auto root = parse_ok(timeline_svg(random_samples(12, 8), o));
  const auto titles = root->with_class("title");
  ASSERT_EQ(titles.size(), 1u);
  EXPECT_GE(titles[0]->all("tspan").size(), 2u);
  EXPECT_EQ(titles[0]->raw_text(), o.title);
  double title_bottom = 0;
  for (const auto& t : svg_geometry::text_boxes(*root))
    if (o.title.find(t.text) != std::string::npos && t.text.size() > 20) title_bottom = std::max(title_bottom, t.box.y1);
  EXPECT_LT(title_bottom, svg_checks::plot_rect(*root).y0);
  for (const std::string& p : svg_geometry::text_problems(*root)) ADD_FAILURE() << p;
}

}  // namespace
