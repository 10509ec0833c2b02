#include "viz/svg.h"

#include <algorithm>
#include <cmath>
#include <cctype>
#include <cstdio>
#include <limits>

namespace remat {

std::string xml_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // Control characters other than tab / newline are not allowed in XML 1.0: drop them.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n') break;
        out += c;
    }
  }
  return out;
}

namespace {

constexpr double kWidth = 900, kHeight = 560;
const char* const kFont = "DejaVu Sans, Helvetica, Arial, sans-serif";

// A coordinate or value, at most `decimals` digits after the point, trailing zeros dropped.
std::string num(double v, int decimals = 2) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  std::string s = buf;
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  if (s == "-0") s = "0";
  return s;
}

size_t utf8_length(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}
// An estimate of rendered width: DejaVu Sans averages about 0.6 em per character.
double text_width(const std::string& s, double size) { return 0.6 * size * double(utf8_length(s)); }

struct Box {
  double x0, y0, x1, y1;
  bool overlaps(const Box& o) const { return x0 < o.x1 && o.x0 < x1 && y0 < o.y1 && o.y0 < y1; }
  bool inside(const Box& o) const { return x0 >= o.x0 && x1 <= o.x1 && y0 >= o.y0 && y1 <= o.y1; }
};

// The box of a text drawn at (x, y) (baseline) with the given anchor.
Box text_box(double x, double y, const std::string& s, double size, const std::string& anchor) {
  const double w = text_width(s, size);
  const double left = anchor == "start" ? x : anchor == "end" ? x - w : x - w / 2;
  return {left - 1, y - 0.8 * size, left + w + 1, y + 0.25 * size};
}

std::string text(double x, double y, const std::string& s, double size, const std::string& anchor,
                 const std::string& extra = "") {
  return "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" font-size=\"" + num(size) + "\" text-anchor=\"" + anchor +
         "\"" + (extra.empty() ? "" : " " + extra) + ">" + xml_escape(s) + "</text>\n";
}
// Text with a white halo, readable over lines and areas.
std::string halo_text(double x, double y, const std::string& s, double size, const std::string& anchor,
                      const std::string& extra = "") {
  return text(x, y, s, size, anchor,
              "stroke=\"white\" stroke-width=\"3\" stroke-linejoin=\"round\" paint-order=\"stroke\"" +
                  (extra.empty() ? "" : " " + extra));
}

// Ticks at 1, 2 or 5 times a power of ten, about `target` of them, covering [lo, hi]: the first tick
// is at or below lo and the last at or above hi, so the axis range is [front, back].
std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo)) hi = lo + (lo == 0 ? 1 : std::abs(lo) * 0.1);
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  const double step = (norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 5 ? 5 : 10) * mag;
  const double first = std::floor(lo / step + 1e-9) * step, last = std::ceil(hi / step - 1e-9) * step;
  std::vector<double> t;
  for (int i = 0; first + i * step <= last + step * 1e-6; ++i) t.push_back(first + i * step);
  return t;
}
int tick_decimals(const std::vector<double>& t) {
  if (t.size() < 2) return 0;
  const double step = t[1] - t[0];
  return std::max(0, int(std::ceil(-std::log10(step) - 1e-9)));
}

// A bytes axis: ticks in the unit of its largest value, labelled "0", "5 MiB", "10 MiB", ...
struct BytesAxis {
  std::vector<double> ticks;  // bytes
  std::vector<std::string> labels;
};
BytesAxis bytes_axis(double lo, double hi, int target) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (u < 4 && hi >= std::pow(1024.0, u + 1)) ++u;
  const double scale = std::pow(1024.0, u);
  const std::vector<double> t = nice_ticks(lo / scale, hi / scale, target);
  const int d = tick_decimals(t);
  BytesAxis a;
  for (double v : t) {
    a.ticks.push_back(v * scale);
    a.labels.push_back(std::abs(v) < 1e-12 ? "0" : num(v, d) + " " + units[u]);
  }
  return a;
}

std::string svg_open(const std::string& title) {
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
         num(kWidth) + "\" height=\"" + num(kHeight) + "\" viewBox=\"0 0 " + num(kWidth) + " " + num(kHeight) +
         "\" font-family=\"" + kFont + "\">\n<title>" + xml_escape(title) + "</title>\n<rect width=\"" +
         num(kWidth) + "\" height=\"" + num(kHeight) + "\" fill=\"white\"/>\n";
}

// The title, shrunk to fit the width.
std::string title_text(const std::string& title) {
  double size = 16;
  while (size > 10 && text_width(title, size) > kWidth - 40) size -= 0.5;
  return text(kWidth / 2, 30, title, size, "middle", "class=\"title\" font-weight=\"bold\" fill=\"#222\"");
}

// A linear map from a value range onto a pixel range.
struct Scale {
  double v0, v1, p0, p1;
  double operator()(double v) const { return p0 + (v - v0) / (v1 - v0) * (p1 - p0); }
};

// Labels placed one by one where they overlap nothing placed before (markers, legend, other labels)
// and stay inside the plot.
struct LabelPlacer {
  Box area;
  std::vector<Box> taken;
  // Candidate positions around a marker at (x, y) of radius r: right, left, above, below, then the
  // diagonals, on up to `rings` rings further out. Returns the SVG of the label (with a leader line
  // when it sits away from the marker), or "" when no position is free and `force` is false (then the
  // first candidate inside the plot is used when forcing).
  std::string place(double x, double y, double r, const std::string& label, double size, bool force,
                    const std::string& extra, int rings = 3) {
    // A label wider than 60% of the plot is cut, with an ellipsis (the whole of it is in the tooltip).
    std::string s = label;
    const double max_w = 0.6 * (area.x1 - area.x0);
    if (text_width(s, size) > max_w) {
      while (!s.empty() && text_width(s + "\u2026", size) > max_w) {
        s.pop_back();
        while (!s.empty() && (static_cast<unsigned char>(s.back()) & 0xC0) == 0x80) s.pop_back();  // whole code points
        if (!s.empty() && static_cast<unsigned char>(s.back()) >= 0xC0) s.pop_back();
      }
      s += "\u2026";
    }
    struct Cand { double x, y; const char* anchor; double ring; };
    std::vector<Cand> cands;
    const double ring_at[] = {1.0, 2.2, 3.6};
    for (int k = 0; k < std::clamp(rings, 1, 3); ++k) {
      const double ring = ring_at[k];
      const double d = (r + 4) * ring, e = d * 0.75;
      cands.push_back({x + d, y + 0.35 * size, "start", ring});
      cands.push_back({x - d, y + 0.35 * size, "end", ring});
      cands.push_back({x, y - d, "middle", ring});
      cands.push_back({x, y + d + 0.8 * size, "middle", ring});
      cands.push_back({x + e, y - e, "start", ring});
      cands.push_back({x + e, y + e + 0.8 * size, "start", ring});
      cands.push_back({x - e, y - e, "end", ring});
      cands.push_back({x - e, y + e + 0.8 * size, "end", ring});
    }
    const Cand* chosen = nullptr;
    const Cand* fallback = nullptr;
    for (const Cand& c : cands) {
      const Box b = text_box(c.x, c.y, s, size, c.anchor);
      if (!b.inside(area)) continue;
      if (!fallback) fallback = &c;
      if (std::none_of(taken.begin(), taken.end(), [&](const Box& t) { return t.overlaps(b); })) {
        chosen = &c;
        break;
      }
    }
    if (!chosen && force) chosen = fallback ? fallback : &cands[0];
    if (!chosen) return "";
    const Box b = text_box(chosen->x, chosen->y, s, size, chosen->anchor);
    taken.push_back(b);
    std::string out;
    if (chosen->ring > 1) {  // a leader line from the marker's edge to the label's nearest edge
      const double lx = std::clamp(x, b.x0, b.x1), ly = std::clamp(y, b.y0, b.y1);
      const double dx = lx - x, dy = ly - y, len = std::hypot(dx, dy);
      if (len > r + 1)
        out += "<line x1=\"" + num(x + dx / len * r) + "\" y1=\"" + num(y + dy / len * r) + "\" x2=\"" + num(lx) +
               "\" y2=\"" + num(ly) + "\" stroke=\"#888\" stroke-width=\"0.8\"/>\n";
    }
    return out + halo_text(chosen->x, chosen->y, s, size, chosen->anchor, extra);
  }
};

struct Plot {
  double x0, y0, x1, y1;
};

std::string plot_frame(const Plot& p, double vx0, double vx1, double vy0, double vy1) {
  return "<rect class=\"plot\" x=\"" + num(p.x0) + "\" y=\"" + num(p.y0) + "\" width=\"" + num(p.x1 - p.x0) +
         "\" height=\"" + num(p.y1 - p.y0) + "\" fill=\"none\" stroke=\"#444\" stroke-width=\"1\" data-x0=\"" +
         num(vx0, 6) + "\" data-x1=\"" + num(vx1, 6) + "\" data-y0=\"" + num(vy0, 6) + "\" data-y1=\"" +
         num(vy1, 6) + "\"/>\n";
}

// Grid line, tick mark and label of one x tick (class xtick) or y tick (class ytick).
std::string xtick(const Plot& p, double x, double value, const std::string& label, bool grid) {
  std::string s = "<g class=\"xtick\" data-value=\"" + num(value, 6) + "\">";
  if (grid)
    s += "<line x1=\"" + num(x) + "\" y1=\"" + num(p.y0) + "\" x2=\"" + num(x) + "\" y2=\"" + num(p.y1) +
         "\" stroke=\"#e4e4e4\"/>";
  s += "<line x1=\"" + num(x) + "\" y1=\"" + num(p.y1) + "\" x2=\"" + num(x) + "\" y2=\"" + num(p.y1 + 5) +
       "\" stroke=\"#444\"/>";
  return s + text(x, p.y1 + 19, label, 12, "middle", "fill=\"#333\"") + "</g>\n";
}
std::string ytick(const Plot& p, double y, double value, const std::string& label) {
  std::string s = "<g class=\"ytick\" data-value=\"" + num(value, 6) + "\">";
  s += "<line x1=\"" + num(p.x0) + "\" y1=\"" + num(y) + "\" x2=\"" + num(p.x1) + "\" y2=\"" + num(y) +
       "\" stroke=\"#e4e4e4\"/>";
  s += "<line x1=\"" + num(p.x0 - 5) + "\" y1=\"" + num(y) + "\" x2=\"" + num(p.x0) + "\" y2=\"" + num(y) +
       "\" stroke=\"#444\"/>";
  return s + text(p.x0 - 8, y + 4, label, 12, "end", "fill=\"#333\"") + "</g>\n";
}
std::string axis_titles(const Plot& p, const std::string& x, const std::string& y, double x_offset = 44) {
  return text((p.x0 + p.x1) / 2, p.y1 + x_offset, x, 13, "middle", "class=\"axis-title\" fill=\"#222\"") +
         "<text class=\"axis-title\" x=\"0\" y=\"0\" font-size=\"13\" text-anchor=\"middle\" fill=\"#222\" "
         "transform=\"translate(" + num(22) + " " + num((p.y0 + p.y1) / 2) + ") rotate(-90)\">" + xml_escape(y) +
         "</text>\n";
}

// Legend rows: a swatch drawn by `swatch(x, y)` (centre of a 14 px cell) and a label.
struct LegendRow {
  std::string swatch;  // SVG with placeholders: {X}, {Y} the cell centre, {X0} {X1} the ends of a line swatch
  std::string label;
};
std::string legend(double x, double y, const std::vector<LegendRow>& rows, double width, Box* box) {
  const double row_h = 18, h = rows.size() * row_h + 10;
  std::string s = "<g class=\"legend\"><rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(width) +
                  "\" height=\"" + num(h) + "\" fill=\"white\" fill-opacity=\"0.92\" stroke=\"#bbb\" rx=\"3\"/>\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const double cy = y + 5 + row_h * (double(i) + 0.5);
    std::string sw = rows[i].swatch;
    for (auto [key, val] : {std::pair<std::string, double>{"{X}", x + 16}, {"{X0}", x + 7}, {"{X1}", x + 25}, {"{Y}", cy}}) {
      for (size_t at; (at = sw.find(key)) != std::string::npos;) sw.replace(at, key.size(), num(val));
    }
    s += sw + text(x + 30, cy + 4, rows[i].label, 12, "start", "fill=\"#222\"");
  }
  *box = {x, y, x + width, y + h};
  return s + "</g>\n";
}
double legend_width(const std::vector<LegendRow>& rows) {
  double w = 0;
  for (const LegendRow& r : rows) w = std::max(w, text_width(r.label, 12));
  return w + 40;
}

const char* const kFrontierColour = "#3b6ea5";
const char* const kTextbookColour = "#e8871e";
const char* const kChosenColour = "#d62728";

std::string diamond(double x, double y, double r, const std::string& attrs) {
  return "<path d=\"M " + num(x) + " " + num(y - r) + " L " + num(x + r) + " " + num(y) + " L " + num(x) + " " +
         num(y + r) + " L " + num(x - r) + " " + num(y) + " Z\" " + attrs + "/>";
}

}  // namespace

std::string frontier_svg(const std::vector<SvgPoint>& points, const std::string& title) {
  const Plot p{92, 52, 872, 490};
  double bmin = std::numeric_limits<double>::infinity(), bmax = -bmin, omin = 1, omax = 1;
  for (const SvgPoint& q : points) {
    bmin = std::min(bmin, q.bytes);
    bmax = std::max(bmax, q.bytes);
    omin = std::min(omin, q.overhead);
    omax = std::max(omax, q.overhead);
  }
  if (points.empty()) bmin = 0, bmax = 1024;
  const double bpad = std::max((bmax - bmin) * 0.06, bmax * 0.02), opad = std::max((omax - omin) * 0.06, 0.01);
  const BytesAxis xa = bytes_axis(std::max(0.0, bmin - bpad), bmax + bpad, 8);
  std::vector<double> yt = nice_ticks(std::max(0.0, omin - opad), omax + opad, 7);
  const Scale sx{xa.ticks.front(), xa.ticks.back(), p.x0, p.x1};
  const Scale sy{yt.front(), yt.back(), p.y1, p.y0};

  std::string s = svg_open(title) + title_text(title);
  // Axes: grid and ticks first, so everything else draws over them.
  for (size_t i = 0; i < xa.ticks.size(); ++i) s += xtick(p, sx(xa.ticks[i]), xa.ticks[i], xa.labels[i], true);
  const int yd = std::max(2, tick_decimals(yt));
  for (double v : yt) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.*fx", yd, v);  // "1.25x"
    s += ytick(p, sy(v), v, buf);
  }
  s += plot_frame(p, xa.ticks.front(), xa.ticks.back(), yt.front(), yt.back());
  s += axis_titles(p, "predicted peak memory", "predicted step time / store-everything");

  // The Pareto staircase through the frontier points, ascending in memory: with a budget between two
  // points, the best plan is the one on the left, so the line runs right at its height, then drops.
  // Points another frontier point dominates (no less memory and no less time: possible when the
  // points are priced by another measure than the planner's) are drawn but not joined.
  std::vector<const SvgPoint*> all_fr, fr;
  for (const SvgPoint& q : points)
    if (q.kind == SvgPoint::Kind::Frontier) all_fr.push_back(&q);
  std::sort(all_fr.begin(), all_fr.end(), [](const SvgPoint* a, const SvgPoint* b) {
    return a->bytes != b->bytes ? a->bytes < b->bytes : a->overhead < b->overhead;
  });
  for (const SvgPoint* q : all_fr)
    if (fr.empty() || q->overhead < fr.back()->overhead) fr.push_back(q);
  if (!fr.empty()) {
    std::string d = "M " + num(sx(fr[0]->bytes)) + " " + num(sy(fr[0]->overhead));
    for (size_t i = 1; i < fr.size(); ++i) d += " H " + num(sx(fr[i]->bytes)) + " V " + num(sy(fr[i]->overhead));
    d += " H " + num(p.x1);  // beyond the last point, more memory buys nothing
    s += "<path class=\"staircase\" d=\"" + d + "\" fill=\"none\" stroke=\"" + kFrontierColour +
         "\" stroke-width=\"2\" stroke-linejoin=\"miter\"/>\n";
  }

  // Legend, top right (the staircase runs from top left to bottom right).
  std::vector<LegendRow> rows;
  const auto has = [&](SvgPoint::Kind k) {
    return std::any_of(points.begin(), points.end(), [&](const SvgPoint& q) { return q.kind == k; });
  };
  if (has(SvgPoint::Kind::Frontier))
    rows.push_back({"<line x1=\"{X0}\" y1=\"{Y}\" x2=\"{X1}\" y2=\"{Y}\" stroke=\"" + std::string(kFrontierColour) +
                        "\" stroke-width=\"2\"/><circle cx=\"{X}\" cy=\"{Y}\" r=\"4\" fill=\"" +
                        std::string(kFrontierColour) + "\"/>",
                    "optimal plans (Pareto frontier)"});
  if (has(SvgPoint::Kind::Textbook))
    rows.push_back({"<g transform=\"translate({X} {Y})\">" +
                        diamond(0, 0, 6, "fill=\"" + std::string(kTextbookColour) + "\" stroke=\"#7a4300\"") + "</g>",
                    "textbook strategy"});
  if (has(SvgPoint::Kind::Chosen))
    rows.push_back({"<circle cx=\"{X}\" cy=\"{Y}\" r=\"7\" fill=\"none\" stroke=\"" + std::string(kChosenColour) +
                        "\" stroke-width=\"2.5\"/>",
                    "chosen plan"});
  LabelPlacer placer{{p.x0 + 2, p.y0 + 2, p.x1 - 2, p.y1 - 2}, {}};
  std::string legend_svg;
  if (!rows.empty()) {
    const double w = legend_width(rows);
    Box b{};
    legend_svg = legend(p.x1 - w - 10, p.y0 + 10, rows, w, &b);
    placer.taken.push_back(b);
  }

  // Markers, with their labels as tooltips (<title>), in drawing order: frontier, textbook, chosen.
  struct Marker { const SvgPoint* q; double x, y, r; };
  std::vector<Marker> markers;
  std::string marks;
  for (SvgPoint::Kind k : {SvgPoint::Kind::Frontier, SvgPoint::Kind::Textbook, SvgPoint::Kind::Chosen}) {
    for (const SvgPoint& q : points) {
      if (q.kind != k) continue;
      const double x = sx(q.bytes), y = sy(q.overhead);
      const char* cls = k == SvgPoint::Kind::Frontier ? "frontier" : k == SvgPoint::Kind::Textbook ? "textbook" : "chosen";
      marks += "<g class=\"point " + std::string(cls) + "\" data-bytes=\"" + num(q.bytes, 0) + "\" data-overhead=\"" +
               num(q.overhead, 6) + "\"><title>" + xml_escape(q.label) + ": " + xml_escape(format_bytes(size_t(q.bytes))) +
               ", " + num(q.overhead, 3) + "x</title>";
      double r = 4;
      if (k == SvgPoint::Kind::Frontier) {
        marks += "<circle cx=\"" + num(x) + "\" cy=\"" + num(y) + "\" r=\"4\" fill=\"" + kFrontierColour + "\"/>";
      } else if (k == SvgPoint::Kind::Textbook) {
        r = 6;
        marks += diamond(x, y, 6, "fill=\"" + std::string(kTextbookColour) + "\" stroke=\"#7a4300\"");
      } else {
        r = 8;
        marks += "<circle cx=\"" + num(x) + "\" cy=\"" + num(y) + "\" r=\"8\" fill=\"none\" stroke=\"" + kChosenColour +
                 "\" stroke-width=\"2.5\"/><circle cx=\"" + num(x) + "\" cy=\"" + num(y) + "\" r=\"2.5\" fill=\"" +
                 kChosenColour + "\"/>";
      }
      marks += "</g>\n";
      markers.push_back({&q, x, y, r});
      placer.taken.push_back({x - r, y - r, x + r, y + r});
    }
  }
  // Visible labels: the chosen plan's first, then the textbook strategies' (both always shown), then
  // at most kFrontierLabels of the frontier's, right beside their markers where they fit, spread
  // along the staircase: both ends, then midpoints by bisection (every label is in its tooltip).
  constexpr int kFrontierLabels = 8;
  std::vector<const Marker*> order;
  for (SvgPoint::Kind k : {SvgPoint::Kind::Chosen, SvgPoint::Kind::Textbook})
    for (const Marker& m : markers)
      if (m.q->kind == k) order.push_back(&m);
  std::vector<const Marker*> fm;
  for (const Marker& m : markers)
    if (m.q->kind == SvgPoint::Kind::Frontier) fm.push_back(&m);
  std::stable_sort(fm.begin(), fm.end(), [](const Marker* a, const Marker* b) { return a->q->bytes < b->q->bytes; });
  if (!fm.empty()) {
    std::vector<bool> used(fm.size(), false);
    std::vector<std::pair<size_t, size_t>> spans{{0, fm.size() - 1}};
    const auto take = [&](size_t i) {
      if (!used[i]) used[i] = true, order.push_back(fm[i]);
    };
    take(0);
    take(fm.size() - 1);
    for (size_t k = 0; k < spans.size(); ++k) {  // breadth first: coarse to fine
      const auto [a, b] = spans[k];
      if (b - a < 2) continue;
      const size_t mid = (a + b) / 2;
      take(mid);
      spans.push_back({a, mid});
      spans.push_back({mid, b});
    }
  }
  std::string labels;
  int frontier_labels = 0;
  for (const Marker* m : order) {
    const SvgPoint::Kind k = m->q->kind;
    if (m->q->label.empty()) continue;
    const bool chosen = k == SvgPoint::Kind::Chosen, frontier = k == SvgPoint::Kind::Frontier;
    if (frontier && frontier_labels >= kFrontierLabels) break;
    const std::string extra = std::string("class=\"label\" fill=\"") +
                              (chosen ? kChosenColour : frontier ? "#1f3f66" : "#8a4a00") + "\"" +
                              (chosen ? " font-weight=\"bold\"" : "");
    const std::string l = placer.place(m->x, m->y, m->r, m->q->label, chosen ? 13 : frontier ? 11 : 12, !frontier,
                                       extra, frontier ? 1 : 3);
    frontier_labels += frontier && !l.empty();
    labels += l;
  }
  return s + marks + labels + legend_svg + "</svg>\n";
}

// ---- timeline -------------------------------------------------------------------------------------

namespace {

struct CategoryStyle {
  Category c;
  const char* label;
  const char* colour;
};
// Stacking order, bottom to top: what lives all step (persistent, optional), checkpoints, saved
// activations, in-flight recompute (the three activation categories), then the transients.
const CategoryStyle kStyles[] = {
    {Category::Parameter, "parameters", "#b9b9b9"},
    {Category::Gradient, "parameter gradients", "#9c9c9c"},
    {Category::OptimizerState, "optimizer state", "#808080"},
    {Category::Data, "data", "#d0d0d0"},
    {Category::Checkpoint, "checkpoints", "#f28e2b"},
    {Category::SavedActivation, "saved activations", "#4e79a7"},
    {Category::Recompute, "recompute (in flight)", "#e15759"},
    {Category::ActivationGrad, "activation gradients", "#59a14f"},
    {Category::Activation, "transients", "#8cd17d"},
    {Category::Workspace, "workspace", "#edc948"},
    {Category::Debug, "debug copies", "#b07aa1"},
};
constexpr bool is_persistent(Category c) {
  return c == Category::Parameter || c == Category::Gradient || c == Category::OptimizerState || c == Category::Data;
}
const CategoryStyle& style(Category c) {
  for (const CategoryStyle& s : kStyles)
    if (s.c == c) return s;
  return kStyles[0];
}

const char* phase_name(TimelineSample::Phase p) {
  switch (p) {
    case TimelineSample::Phase::Forward: return "forward";
    case TimelineSample::Phase::Recompute: return "recompute";
    case TimelineSample::Phase::Backward: return "backward";
  }
  return "?";
}
const char* phase_short(TimelineSample::Phase p) {
  switch (p) {
    case TimelineSample::Phase::Forward: return "fwd";
    case TimelineSample::Phase::Recompute: return "rec";
    case TimelineSample::Phase::Backward: return "bwd";
  }
  return "?";
}
const char* phase_fill(TimelineSample::Phase p) {
  switch (p) {
    case TimelineSample::Phase::Forward: return "#e8f0f8";
    case TimelineSample::Phase::Recompute: return "#fbe9d9";
    case TimelineSample::Phase::Backward: return "#eeeaf4";
  }
  return "white";
}

// A short tag for an event under its tick: "F3" / "R3" / "B3" for block 3, else the event's first
// word after the phase, cut to four letters ("embe" -> "emb", "head").
std::string event_tag(const TimelineSample& s) {
  const std::string& e = s.event;
  const size_t at = e.find("block ");
  if (at != std::string::npos) {
    size_t i = at + 6, j = i;
    while (j < e.size() && std::isdigit(static_cast<unsigned char>(e[j]))) ++j;
    if (j > i) return std::string(1, "FRB"[int(s.phase)]) + e.substr(i, j - i);
  }
  if (e.find("embedding") != std::string::npos) return "emb";
  if (e.find("head") != std::string::npos) return "head";
  const size_t x = e.find(" x");
  if (e.rfind("free", 0) == 0 && x != std::string::npos) return "-" + e.substr(x + 1);
  return "";
}

size_t activation_bytes(const TimelineSample& s) {
  size_t a = 0;
  for (int c = 0; c < kNumCategories; ++c)
    if (is_activation(Category(c))) a += s.live[size_t(c)];
  return a;
}

}  // namespace

std::vector<Category> timeline_categories(bool persistent) {
  std::vector<Category> out;
  for (const CategoryStyle& s : kStyles)
    if (persistent || !is_persistent(s.c)) out.push_back(s.c);
  return out;
}

size_t timeline_top(const TimelineSample& s, bool persistent) {
  size_t t = 0;
  for (Category c : timeline_categories(persistent)) t += s.live[size_t(c)];
  return t;
}

std::string timeline_svg(const std::vector<TimelineSample>& samples, const TimelineOptions& opt) {
  const std::vector<Category> cats = timeline_categories(opt.persistent);
  // Only categories that hold bytes at some event are drawn and listed.
  std::vector<Category> drawn;
  for (Category c : cats)
    if (std::any_of(samples.begin(), samples.end(), [&](const TimelineSample& s) { return s.live[size_t(c)] > 0; }))
      drawn.push_back(c);

  // Legend rows (top of the stack first, as the eye reads it), then phases and the peak.
  std::vector<LegendRow> rows;
  for (auto it = drawn.rbegin(); it != drawn.rend(); ++it)
    rows.push_back({"<rect x=\"{X}\" y=\"{Y}\" width=\"14\" height=\"10\" transform=\"translate(-7 -5)\" fill=\"" +
                        std::string(style(*it).colour) + "\" stroke=\"#555\" stroke-width=\"0.5\"/>",
                    style(*it).label});
  for (TimelineSample::Phase ph :
       {TimelineSample::Phase::Forward, TimelineSample::Phase::Recompute, TimelineSample::Phase::Backward})
    if (std::any_of(samples.begin(), samples.end(), [&](const TimelineSample& s) { return s.phase == ph; }))
      rows.push_back({"<rect x=\"{X}\" y=\"{Y}\" width=\"14\" height=\"10\" transform=\"translate(-7 -5)\" fill=\"" +
                          std::string(phase_fill(ph)) + "\" stroke=\"#999\" stroke-width=\"0.5\"/>",
                      std::string(phase_name(ph)) + " phase"});
  if (!samples.empty())
    rows.push_back({"<line x1=\"{X0}\" y1=\"{Y}\" x2=\"{X1}\" y2=\"{Y}\" stroke=\"#222\" stroke-width=\"1\" "
                    "stroke-dasharray=\"3 2\"/><circle cx=\"{X}\" cy=\"{Y}\" r=\"4\" fill=\"#222\"/>",
                    "activation peak"});
  const double lw = std::max(150.0, legend_width(rows));
  const Plot p{92, 56, kWidth - lw - 30, 470};

  size_t top = 0, peak = 0;
  size_t peak_at = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    top = std::max(top, timeline_top(samples[i], opt.persistent));
    const size_t a = activation_bytes(samples[i]);
    if (a > peak) peak = a, peak_at = i;
  }
  const size_t n = samples.size();
  const BytesAxis ya = bytes_axis(0, double(std::max<size_t>(top, 1)) * 1.08, 6);
  const Scale sy{ya.ticks.front(), ya.ticks.back(), p.y1, p.y0};
  // Events at the centres of n equal columns.
  const double dx = (p.x1 - p.x0) / double(std::max<size_t>(n, 1));
  const auto xs = [&](size_t i) { return p.x0 + dx * (double(i) + 0.5); };

  std::string s = svg_open(opt.title) + title_text(opt.title);
  // Phase bands behind everything, one per run of equal phases, named when there is room.
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j + 1 < n && samples[j + 1].phase == samples[i].phase) ++j;
    const double bx0 = p.x0 + dx * double(i), bx1 = p.x0 + dx * double(j + 1);
    s += "<rect class=\"phase\" data-phase=\"" + std::string(phase_name(samples[i].phase)) + "\" x=\"" + num(bx0) +
         "\" y=\"" + num(p.y0) + "\" width=\"" + num(bx1 - bx0) + "\" height=\"" + num(p.y1 - p.y0) + "\" fill=\"" +
         phase_fill(samples[i].phase) + "\"/>\n";
    for (const char* name : {phase_name(samples[i].phase), phase_short(samples[i].phase)}) {
      if (text_width(name, 11) + 4 <= bx1 - bx0) {
        s += text((bx0 + bx1) / 2, p.y0 + 14, name, 11, "middle", "class=\"phase-label\" fill=\"#555\"");
        break;
      }
    }
    i = j + 1;
  }
  for (size_t i = 0; i < ya.ticks.size(); ++i) s += ytick(p, sy(ya.ticks[i]), ya.ticks[i], ya.labels[i]);

  // The stacked areas: each category's path runs along its top edge left to right, then back along
  // its bottom edge (the previous category's top).
  std::vector<double> base(n, 0.0);
  for (Category c : drawn) {
    std::string upper, lower;
    std::vector<double> next(base);
    for (size_t i = 0; i < n; ++i) {
      next[i] += double(samples[i].live[size_t(c)]);
      upper += std::string(i ? " L " : "M ") + num(xs(i)) + " " + num(sy(next[i]));
    }
    for (size_t i = n; i-- > 0;) lower += " L " + num(xs(i)) + " " + num(sy(base[i]));
    const CategoryStyle& st = style(c);
    s += "<path class=\"layer\" data-category=\"" + std::string(category_name(c)) + "\" d=\"" + upper + lower +
         " Z\" fill=\"" + st.colour + "\" fill-opacity=\"0.9\" stroke=\"#333\" stroke-width=\"0.6\" "
         "stroke-linejoin=\"round\"><title>" + xml_escape(st.label) + "</title></path>\n";
    base = std::move(next);
  }
  s += plot_frame(p, 0, double(n), ya.ticks.front(), ya.ticks.back());

  // x ticks: the event numbers (as remat trace numbers them: sample i is event i), thinned to fit,
  // with each event's short tag under it when every tag fits.
  const double label_w = text_width(std::to_string(n), 12) + 8;
  int every = 1;
  for (int m : {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000})
    if (dx * m >= label_w) { every = m; break; }
  bool tags = dx >= 30;
  for (size_t i = 0; i < n; ++i)
    if (text_width(event_tag(samples[i]), 10) + 2 > dx) tags = false;
  for (size_t i = 0; i < n; ++i) {
    if (i % size_t(every) == 0) s += xtick(p, xs(i), double(i), std::to_string(i), false);
    if (tags) s += text(xs(i), p.y1 + 33, event_tag(samples[i]), 10, "middle", "class=\"tag\" fill=\"#666\"");
  }
  s += axis_titles(p, tags ? "event of one step (F forward, R recompute, B backward of block i)" : "event of one step",
                   "live bytes", tags ? 56 : 44);

  // Hover: one invisible column per event with its name and live bytes (no script: <title>).
  for (size_t i = 0; i < n; ++i) {
    std::string tip = std::to_string(i) + ": " + samples[i].event;
    for (auto it = drawn.rbegin(); it != drawn.rend(); ++it) {
      tip += '\n';
      tip += style(*it).label;
      tip += ' ' + format_bytes(samples[i].live[size_t(*it)]);
    }
    s += "<rect class=\"event\" x=\"" + num(p.x0 + dx * double(i)) + "\" y=\"" + num(p.y0) + "\" width=\"" + num(dx) +
         "\" height=\"" + num(p.y1 - p.y0) + "\" fill=\"transparent\"><title>" + xml_escape(tip) + "</title></rect>\n";
  }

  // The activation peak: a dashed line at its height across the plot and a dot on the event, labelled.
  if (n) {
    double persistent_base = 0;
    for (Category c : drawn)
      if (is_persistent(c)) persistent_base += double(samples[peak_at].live[size_t(c)]);
    const double px = xs(peak_at), py = sy(persistent_base + double(peak));
    s += "<g class=\"peak\" data-bytes=\"" + std::to_string(peak) + "\" data-event=\"" + std::to_string(peak_at) +
         "\"><line x1=\"" + num(p.x0) + "\" y1=\"" + num(py) + "\" x2=\"" + num(p.x1) + "\" y2=\"" + num(py) +
         "\" stroke=\"#222\" stroke-width=\"1\" stroke-dasharray=\"4 3\"/><circle cx=\"" + num(px) + "\" cy=\"" +
         num(py) + "\" r=\"4\" fill=\"#222\"/>";
    LabelPlacer placer{{p.x0 + 2, p.y0 + 18, p.x1 - 2, p.y1 - 2}, {}};
    const std::string label = "peak activations " + format_bytes(peak) + " (event " + std::to_string(peak_at) + ")";
    // Above the line first: the stack is below it.
    std::string placed;
    for (const char* anchor : {"start", "end", "middle"}) {
      const double tx = std::string(anchor) == "start" ? px + 8 : std::string(anchor) == "end" ? px - 8 : px;
      const Box b = text_box(tx, py - 8, label, 12, anchor);
      if (b.inside(placer.area)) {
        placed = halo_text(tx, py - 8, label, 12, anchor, "class=\"label\" font-weight=\"bold\" fill=\"#222\"");
        break;
      }
    }
    if (placed.empty()) placed = placer.place(px, py, 4, label, 12, true, "class=\"label\" font-weight=\"bold\" fill=\"#222\"");
    s += placed + "</g>\n";
  }
  Box b{};
  s += legend(p.x1 + 14, p.y0, rows, lw, &b);
  return s + "</svg>\n";
}

}  // namespace remat
