// The frontier picture of `remat plan --svg` (viz/svg.h).
#include <algorithm>
#include <cmath>
#include <limits>

#include "viz/svg.h"
#include "viz/svg_canvas.h"

namespace remat {

namespace {

using svg::Box;
using svg::num;

const char* const kFrontierColour = "#3b6ea5";
const char* const kTextbookColour = "#e8871e";
const char* const kChosenColour = "#d62728";
const char* const kLeastColour = "#7a1fa2";
const char* const kBudgetColour = "#555555";

const char* kind_class(SvgPoint::Kind k) {
  switch (k) {
    case SvgPoint::Kind::Frontier: return "frontier";
    case SvgPoint::Kind::Textbook: return "textbook";
    case SvgPoint::Kind::Chosen: return "chosen";
    case SvgPoint::Kind::Least: return "least";
  }
  return "?";
}

// A diamond of half-diagonal r, or a square of half-side r, centred on (x, y).
std::string diamond(double x, double y, double r, const std::string& attrs) {
  return "<path d=\"M " + num(x) + " " + num(y - r) + " L " + num(x + r) + " " + num(y) + " L " + num(x) + " " +
         num(y + r) + " L " + num(x - r) + " " + num(y) + " Z\" " + attrs + "/>";
}
std::string square(double x, double y, double r, const std::string& attrs) {
  return "<path d=\"M " + num(x - r) + " " + num(y - r) + " L " + num(x + r) + " " + num(y - r) + " L " + num(x + r) +
         " " + num(y + r) + " L " + num(x - r) + " " + num(y + r) + " Z\" " + attrs + "/>";
}

struct Marker {
  const SvgPoint* q;
  double x, y, r;  // r: the radius of a circle holding the marker
  bool hollow;
};

// The marker of `q` at (x, y), drawn after `drawn`. Frontier points are small dots along the
// staircase. Any other marker that would cover part of one drawn before is drawn as an outline, and
// one whose centre lies on an earlier marker also large enough to ring it, so that both show: a
// textbook strategy at the same cost and bytes as another (selective and flash, say) is a ring
// around it, never hidden under it.
Marker make_marker(const SvgPoint& q, double x, double y, const std::vector<Marker>& drawn, std::string* svg_out) {
  const SvgPoint::Kind k = q.kind;
  double r = k == SvgPoint::Kind::Frontier ? 4 : k == SvgPoint::Kind::Textbook ? 6 : k == SvgPoint::Kind::Least ? 7 : 8;
  bool hollow = k == SvgPoint::Kind::Chosen || k == SvgPoint::Kind::Least;
  if (k != SvgPoint::Kind::Frontier)
    for (const Marker& m : drawn) {
      const double d = std::hypot(x - m.x, y - m.y);
      if (d >= r + m.r) continue;
      hollow = true;
      if (d < m.r) r = std::max(r, d + m.r + 3);
    }
  std::string& s = *svg_out;
  if (k == SvgPoint::Kind::Frontier) {
    s += "<circle cx=\"" + num(x) + "\" cy=\"" + num(y) + "\" r=\"4\" fill=\"" + kFrontierColour + "\"/>";
  } else if (k == SvgPoint::Kind::Textbook) {
    // A diamond's inscribed circle is its half-diagonal / sqrt 2: scaled so that it rings what it must.
    const double half = hollow ? r * std::sqrt(2.0) : r;
    s += diamond(x, y, half, hollow ? "fill=\"none\" stroke=\"" + std::string(kTextbookColour) + "\" stroke-width=\"2\""
                                    : "fill=\"" + std::string(kTextbookColour) + "\" stroke=\"#7a4300\"");
    r = half;
  } else if (k == SvgPoint::Kind::Least) {
    s += square(x, y, r, "fill=\"none\" stroke=\"" + std::string(kLeastColour) + "\" stroke-width=\"2.5\"");
    r *= std::sqrt(2.0);
  } else {
    s += "<circle cx=\"" + num(x) + "\" cy=\"" + num(y) + "\" r=\"" + num(r) + "\" fill=\"none\" stroke=\"" +
         kChosenColour + "\" stroke-width=\"2.5\"/>";
  }
  return {&q, x, y, r, hollow};
}

// Frontier labels to show, at most `limit`, spread along the staircase: both ends, then midpoints by
// bisection, coarse to fine (every label is in its marker's tooltip).
std::vector<const Marker*> spread(std::vector<const Marker*> fm, size_t limit) {
  std::stable_sort(fm.begin(), fm.end(), [](const Marker* a, const Marker* b) { return a->q->bytes < b->q->bytes; });
  std::vector<const Marker*> order;
  if (fm.empty()) return order;
  std::vector<bool> used(fm.size(), false);
  const auto take = [&](size_t i) {
    if (!used[i] && order.size() < limit) used[i] = true, order.push_back(fm[i]);
  };
  take(0);
  take(fm.size() - 1);
  std::vector<std::pair<size_t, size_t>> spans{{0, fm.size() - 1}};
  for (size_t k = 0; k < spans.size(); ++k) {
    const auto [a, b] = spans[k];
    if (b - a < 2) continue;
    const size_t mid = (a + b) / 2;
    take(mid);
    spans.push_back({a, mid});
    spans.push_back({mid, b});
  }
  return order;
}

}  // namespace

std::string frontier_svg(const std::vector<SvgPoint>& points, const FrontierOptions& opt) {
  double title_bottom = 0;
  const std::string title = svg::title_text(opt.title, &title_bottom);
  const svg::Plot p{92, title_bottom + 14, 872, 490};
  const bool ratio = opt.cost == FrontierOptions::Cost::Ratio;
  double bmin = std::numeric_limits<double>::infinity(), bmax = -bmin, cmin = bmin, cmax = -bmin;
  for (const SvgPoint& q : points) {
    bmin = std::min(bmin, q.bytes), bmax = std::max(bmax, q.bytes);
    cmin = std::min(cmin, q.cost), cmax = std::max(cmax, q.cost);
  }
  if (opt.budget) bmin = std::min(bmin, *opt.budget), bmax = std::max(bmax, *opt.budget);
  if (bmin > bmax) bmin = 0, bmax = 1024;
  if (cmin > cmax) cmin = cmax = ratio ? 1.0 : 0.1;
  const double bpad = std::max((bmax - bmin) * 0.06, bmax * 0.02);
  const double cpad = std::max((cmax - cmin) * 0.08, cmax * 0.01);
  const svg::Axis xa = svg::bytes_axis(std::max(0.0, bmin - bpad), bmax + bpad, 8);
  const svg::Axis ya = ratio ? svg::ratio_axis(std::max(0.0, cmin - cpad), cmax + cpad, 7)
                             : svg::seconds_axis(std::max(0.0, cmin - cpad), cmax + cpad, 7);
  const svg::Scale sx{xa.ticks.front(), xa.ticks.back(), p.x0, p.x1};
  const svg::Scale sy{ya.ticks.front(), ya.ticks.back(), p.y1, p.y0};

  std::string s = svg::svg_open(opt.title) + title;
  // Axes: grid and ticks first, so everything else draws over them.
  for (size_t i = 0; i < xa.ticks.size(); ++i) s += svg::xtick(p, sx(xa.ticks[i]), xa.ticks[i], xa.labels[i], true);
  for (size_t i = 0; i < ya.ticks.size(); ++i) s += svg::ytick(p, sy(ya.ticks[i]), ya.ticks[i], ya.labels[i]);
  s += svg::plot_frame(p, xa.ticks.front(), xa.ticks.back(), ya.ticks.front(), ya.ticks.back());
  s += svg::axis_titles(p, opt.bytes_title, opt.cost_title);
  std::vector<Box> ink;  // what the legend must not cover: the budget line, staircase and markers

  // The budget: a dashed line at its bytes, plans left of it fit.
  double budget_x = 0;
  if (opt.budget) {
    budget_x = sx(*opt.budget);
    s += "<line class=\"budget\" data-bytes=\"" + num(*opt.budget, 0) + "\" x1=\"" + num(budget_x) + "\" y1=\"" +
         num(p.y0) + "\" x2=\"" + num(budget_x) + "\" y2=\"" + num(p.y1) + "\" stroke=\"" +
         (opt.budget_met ? kBudgetColour : kLeastColour) + "\" stroke-width=\"1.5\" stroke-dasharray=\"6 4\"/>\n";
    ink.push_back({budget_x - 1, p.y0, budget_x + 1, p.y1});
  }

  // The Pareto staircase through the frontier points, ascending in memory: with a budget between two
  // points, the best plan is the one on the left, so the line runs right at its height, then drops.
  // Points another frontier point dominates (no less memory and no less cost) are drawn, not joined.
  std::vector<const SvgPoint*> all_fr, fr;
  for (const SvgPoint& q : points)
    if (q.kind == SvgPoint::Kind::Frontier) all_fr.push_back(&q);
  std::sort(all_fr.begin(), all_fr.end(), [](const SvgPoint* a, const SvgPoint* b) {
    return a->bytes != b->bytes ? a->bytes < b->bytes : a->cost < b->cost;
  });
  for (const SvgPoint* q : all_fr)
    if (fr.empty() || q->cost < fr.back()->cost) fr.push_back(q);
  if (!fr.empty()) {
    double x = sx(fr[0]->bytes), y = sy(fr[0]->cost);
    std::string d = "M " + num(x) + " " + num(y);
    for (size_t i = 1; i < fr.size(); ++i) {
      const double nx = sx(fr[i]->bytes), ny = sy(fr[i]->cost);
      d += " H " + num(nx) + " V " + num(ny);
      ink.push_back({x, y - 1, nx, y + 1});
      ink.push_back({nx - 1, y, nx + 1, ny});
      x = nx, y = ny;
    }
    d += " H " + num(p.x1);  // beyond the last point, more memory buys nothing
    ink.push_back({x, y - 1, p.x1, y + 1});
    s += "<path class=\"staircase\" d=\"" + d + "\" fill=\"none\" stroke=\"" + kFrontierColour +
         "\" stroke-width=\"2\" stroke-linejoin=\"miter\"/>\n";
  }

  // Markers, with their labels as tooltips (<title>), in drawing order: frontier, textbook, least, chosen.
  std::vector<Marker> markers;
  std::string marks;
  for (SvgPoint::Kind k : {SvgPoint::Kind::Frontier, SvgPoint::Kind::Textbook, SvgPoint::Kind::Least,
                           SvgPoint::Kind::Chosen})
    for (const SvgPoint& q : points) {
      if (q.kind != k) continue;
      const double x = sx(q.bytes), y = sy(q.cost);
      const std::string cost = ratio ? num(q.cost, 3) + "x" : num(q.cost * 1e3, 1) + " ms";
      marks += "<g class=\"point " + std::string(kind_class(k)) + "\" data-bytes=\"" + num(q.bytes, 0) +
               "\" data-cost=\"" + num(q.cost, 6) + "\"><title>" + xml_escape(q.label) + ": " +
               xml_escape(format_bytes(size_t(q.bytes))) + ", " + cost + "</title>";
      markers.push_back(make_marker(q, x, y, markers, &marks));
      marks += "</g>\n";
      ink.push_back({x - markers.back().r, y - markers.back().r, x + markers.back().r, y + markers.back().r});
    }

  // Legend in the first corner of the plot where it covers no line or marker (below-left of the
  // staircase is empty by construction: no plan beats the frontier), drawn under the markers.
  std::vector<svg::LegendRow> rows;
  const auto has = [&](SvgPoint::Kind k) {
    return std::any_of(points.begin(), points.end(), [&](const SvgPoint& q) { return q.kind == k; });
  };
  const std::string fc = kFrontierColour, tc = kTextbookColour;
  if (has(SvgPoint::Kind::Frontier))
    rows.push_back({"<line x1=\"{X0}\" y1=\"{Y}\" x2=\"{X1}\" y2=\"{Y}\" stroke=\"" + fc + "\" stroke-width=\"2\"/>"
                    "<circle cx=\"{X}\" cy=\"{Y}\" r=\"4\" fill=\"" + fc + "\"/>",
                    "optimal plans (Pareto frontier)"});
  if (has(SvgPoint::Kind::Textbook))
    rows.push_back({"<g transform=\"translate({X} {Y})\">" + diamond(0, 0, 6, "fill=\"" + tc + "\" stroke=\"#7a4300\"") +
                        "</g>",
                    "textbook strategy"});
  if (has(SvgPoint::Kind::Chosen))
    rows.push_back({"<circle cx=\"{X}\" cy=\"{Y}\" r=\"7\" fill=\"none\" stroke=\"" + std::string(kChosenColour) +
                        "\" stroke-width=\"2.5\"/>",
                    "chosen plan"});
  if (has(SvgPoint::Kind::Least))
    rows.push_back({"<g transform=\"translate({X} {Y})\">" +
                        square(0, 0, 5.5, "fill=\"none\" stroke=\"" + std::string(kLeastColour) + "\" stroke-width=\"2\"") +
                        "</g>",
                    "least whole-step peak"});
  if (opt.budget)
    rows.push_back({"<line x1=\"{X0}\" y1=\"{Y}\" x2=\"{X1}\" y2=\"{Y}\" stroke=\"" +
                        std::string(opt.budget_met ? kBudgetColour : kLeastColour) +
                        "\" stroke-width=\"1.5\" stroke-dasharray=\"6 4\"/>",
                    opt.budget_met ? "budget" : "budget (no plan fits)"});
  svg::LabelPlacer placer{{p.x0 + 2, p.y0 + 2, p.x1 - 2, p.y1 - 2}, {}};
  std::string legend_svg;
  if (!rows.empty()) {
    const double w = svg::legend_width(rows), h = svg::legend_height(rows);
    const Box corners[] = {{p.x1 - 10 - w, p.y0 + 10, p.x1 - 10, p.y0 + 10 + h},
                           {p.x0 + 10, p.y1 - 10 - h, p.x0 + 10 + w, p.y1 - 10},
                           {p.x0 + 10, p.y0 + 10, p.x0 + 10 + w, p.y0 + 10 + h},
                           {p.x1 - 10 - w, p.y1 - 10 - h, p.x1 - 10, p.y1 - 10}};
    const Box* best = &corners[0];
    size_t least_covered = std::numeric_limits<size_t>::max();
    for (const Box& c : corners) {
      const size_t covered = size_t(std::count_if(ink.begin(), ink.end(), [&](const Box& b) { return b.overlaps(c); }));
      if (covered < least_covered) least_covered = covered, best = &c;
    }
    Box b{};
    legend_svg = svg::legend(best->x0, best->y0, rows, w, &b);
    placer.taken.push_back(b);
  }
  for (const Marker& m : markers) placer.taken.push_back({m.x - m.r, m.y - m.r, m.x + m.r, m.y + m.r});

  // Visible labels: the chosen plan's, the least, the budget's and the textbook strategies' (all
  // searched for room further out, with a leader line), then up to 8 of the frontier's, right beside
  // their markers where they fit.
  std::string labels;
  const auto label = [&](const Marker& m, double size, const std::string& colour, bool bold, int rings) {
    if (m.q->label.empty()) return false;
    const std::string extra = "class=\"label\" fill=\"" + colour + "\"" + (bold ? " font-weight=\"bold\"" : "");
    const std::string l = placer.place(m.x, m.y, m.r, m.q->label, size, extra, rings);
    labels += l;
    return !l.empty();
  };
  for (const Marker& m : markers)
    if (m.q->kind == SvgPoint::Kind::Chosen) label(m, 13, kChosenColour, true, 8);
  for (const Marker& m : markers)
    if (m.q->kind == SvgPoint::Kind::Least) label(m, 12, kLeastColour, true, 8);
  if (opt.budget) {
    const std::string text = "budget " + format_bytes(size_t(*opt.budget)) +
                             (opt.budget_met ? "" : ": no plan fits");
    const SvgPoint bp{*opt.budget, 0, text, SvgPoint::Kind::Frontier};
    const Marker m{&bp, budget_x, p.y0 + 14, 0, true};
    label(m, 12, opt.budget_met ? kBudgetColour : kLeastColour, false, 4);
  }
  for (const Marker& m : markers)
    if (m.q->kind == SvgPoint::Kind::Textbook) label(m, 12, "#8a4a00", false, 8);
  std::vector<const Marker*> fm;
  for (const Marker& m : markers)
    if (m.q->kind == SvgPoint::Kind::Frontier) fm.push_back(&m);
  int shown = 0;
  for (const Marker* m : spread(fm, fm.size()))
    if (shown < 8) shown += label(*m, 11, "#1f3f66", false, 1);
  return s + legend_svg + marks + labels + "</svg>\n";
}

}  // namespace remat
