// The live-memory timeline of `remat trace --svg` (viz/svg.h).
#include <algorithm>
#include <cctype>

#include "viz/svg.h"
#include "viz/svg_canvas.h"

namespace remat {

namespace {

using svg::Box;
using svg::num;
using Phase = TimelineSample::Phase;

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
    {Category::OptimizerState, "optimizer state (AdamW)", "#808080"},
    {Category::Data, "data", "#d0d0d0"},
    {Category::Checkpoint, "checkpoints", "#f28e2b"},
    {Category::SavedActivation, "saved activations", "#4e79a7"},
    {Category::Recompute, "recompute (in flight)", "#e15759"},
    {Category::ActivationGrad, "activation gradients", "#59a14f"},
    {Category::Activation, "transients", "#8cd17d"},
    {Category::Workspace, "workspace", "#edc948"},
    {Category::KVCache, "key/value cache", "#76b7b2"},
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

struct PhaseStyle {
  const char* name;
  const char* short_name;
  const char* fill;
};
PhaseStyle phase_style(Phase p) {
  switch (p) {
    case Phase::Forward: return {"forward", "fwd", "#e8f0f8"};
    case Phase::Recompute: return {"recompute", "rec", "#fbe9d9"};
    case Phase::Backward: return {"backward", "bwd", "#eeeaf4"};
    case Phase::Optimizer: return {"optimizer", "opt", "#eef3e2"};
  }
  return {"?", "?", "white"};
}

// A short tag for an event under its tick: "F3" / "R3" / "B3" for block 3, else the event's first
// word after the phase, cut to four letters ("embe" -> "emb", "head").
std::string event_tag(const TimelineSample& s) {
  const std::string& e = s.event;
  const size_t at = e.find("block ");
  if (at != std::string::npos && s.phase != Phase::Optimizer) {
    size_t i = at + 6, j = i;
    while (j < e.size() && std::isdigit(static_cast<unsigned char>(e[j]))) ++j;
    if (j > i) return std::string(1, "FRB"[int(s.phase)]) + e.substr(i, j - i);
  }
  if (s.phase == Phase::Optimizer) return "opt";
  if (e.find("embedding") != std::string::npos) return "emb";
  if (e.find("head") != std::string::npos) return "head";
  const size_t x = e.find(" x");
  if (e.rfind("free", 0) == 0 && x != std::string::npos) return "-" + e.substr(x + 1);
  return "";
}

size_t activation_bytes(const std::array<size_t, kNumCategories>& live) {
  size_t a = 0;
  for (int c = 0; c < kNumCategories; ++c)
    if (is_activation(Category(c))) a += live[size_t(c)];
  return a;
}

// One point of the drawn stack: an event's end, or its highest moment before it.
struct StackPoint {
  double x;
  const std::array<size_t, kNumCategories>* live;
  size_t event;
};

}  // namespace

std::vector<Category> timeline_categories(bool persistent) {
  std::vector<Category> out;
  for (const CategoryStyle& s : kStyles)
    if (persistent || !is_persistent(s.c)) out.push_back(s.c);
  return out;
}

size_t timeline_top(const std::array<size_t, kNumCategories>& live, bool persistent) {
  size_t t = 0;
  for (Category c : timeline_categories(persistent)) t += live[size_t(c)];
  return t;
}

std::string timeline_svg(const std::vector<TimelineSample>& samples, const TimelineOptions& opt) {
  const size_t n = samples.size();
  double title_bottom = 0;
  const std::string title = svg::title_text(opt.title, &title_bottom);
  // The stack's points, left to right: each event's highest moment (when above its end), at the
  // column's left edge (between the previous event's end and its own), then its end at the centre.
  std::vector<StackPoint> pts;
  const auto high_of = [&](const TimelineSample& s) -> const std::array<size_t, kNumCategories>* {
    return s.high && timeline_top(*s.high, opt.persistent) > timeline_top(s.live, opt.persistent) ? &*s.high : nullptr;
  };
  // Only categories that hold bytes at some point are drawn and listed.
  std::vector<Category> drawn;
  for (Category c : timeline_categories(opt.persistent))
    if (std::any_of(samples.begin(), samples.end(), [&](const TimelineSample& s) {
          return s.live[size_t(c)] > 0 || (high_of(s) && (*s.high)[size_t(c)] > 0);
        }))
      drawn.push_back(c);

  // Legend rows (top of the stack first, as the eye reads it), then phases and the marks.
  std::vector<svg::LegendRow> rows;
  const auto swatch = [](const char* fill, const char* stroke) {
    return "<rect x=\"{X}\" y=\"{Y}\" width=\"14\" height=\"10\" transform=\"translate(-7 -5)\" fill=\"" +
           std::string(fill) + "\" stroke=\"" + stroke + "\" stroke-width=\"0.5\"/>";
  };
  for (auto it = drawn.rbegin(); it != drawn.rend(); ++it) rows.push_back({swatch(style(*it).colour, "#555"), style(*it).label});
  for (Phase ph : {Phase::Forward, Phase::Recompute, Phase::Backward, Phase::Optimizer})
    if (std::any_of(samples.begin(), samples.end(), [&](const TimelineSample& s) { return s.phase == ph; }))
      rows.push_back({swatch(phase_style(ph).fill, "#999"), std::string(phase_style(ph).name) + " phase"});
  const char* top_name = opt.persistent ? "whole-step peak" : "highest stack";
  if (n) {
    rows.push_back({"<line x1=\"{X0}\" y1=\"{Y}\" x2=\"{X1}\" y2=\"{Y}\" stroke=\"#222\" stroke-width=\"1\" "
                    "stroke-dasharray=\"3 2\"/><circle cx=\"{X}\" cy=\"{Y}\" r=\"4\" fill=\"#222\"/>",
                    "activation peak"});
    rows.push_back({"<line x1=\"{X0}\" y1=\"{Y}\" x2=\"{X1}\" y2=\"{Y}\" stroke=\"#8b0000\" stroke-width=\"1.2\"/>"
                    "<path d=\"M {X} {Y} m -5 -6 h 10 l -5 6 z\" fill=\"#8b0000\"/>",
                    top_name});
  }
  const double lw = std::max(150.0, svg::legend_width(rows));
  const svg::Plot p{92, title_bottom + 14, svg::kWidth - lw - 30, 470};
  const double dx = (p.x1 - p.x0) / double(std::max<size_t>(n, 1));
  const auto centre = [&](size_t i) { return p.x0 + dx * (double(i) + 0.5); };
  for (size_t i = 0; i < n; ++i) {
    if (const auto* h = high_of(samples[i])) pts.push_back({p.x0 + dx * double(i), h, i});
    pts.push_back({centre(i), &samples[i].live, i});
  }

  size_t top = 0, peak = 0, top_at = 0, peak_at = 0;
  for (size_t k = 0; k < pts.size(); ++k) {
    const size_t t = timeline_top(*pts[k].live, opt.persistent), a = activation_bytes(*pts[k].live);
    if (t > top) top = t, top_at = k;
    if (a > peak) peak = a, peak_at = k;
  }
  const svg::Axis ya = svg::bytes_axis(0, double(std::max<size_t>(top, 1)) * 1.08, 6);
  const svg::Scale sy{ya.ticks.front(), ya.ticks.back(), p.y1, p.y0};

  std::string s = svg::svg_open(opt.title) + title;
  // Phase bands behind everything, one per run of equal phases, named when there is room.
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j + 1 < n && samples[j + 1].phase == samples[i].phase) ++j;
    const double bx0 = p.x0 + dx * double(i), bx1 = p.x0 + dx * double(j + 1);
    const PhaseStyle ps = phase_style(samples[i].phase);
    s += "<rect class=\"phase\" data-phase=\"" + std::string(ps.name) + "\" x=\"" + num(bx0) + "\" y=\"" + num(p.y0) +
         "\" width=\"" + num(bx1 - bx0) + "\" height=\"" + num(p.y1 - p.y0) + "\" fill=\"" + ps.fill + "\"/>\n";
    for (const char* name : {ps.name, ps.short_name}) {
      if (svg::text_width(name, 11) + 4 <= bx1 - bx0) {
        s += svg::text((bx0 + bx1) / 2, p.y0 + 14, name, 11, "middle", "class=\"phase-label\" fill=\"#555\"");
        break;
      }
    }
    i = j + 1;
  }
  for (size_t i = 0; i < ya.ticks.size(); ++i) s += svg::ytick(p, sy(ya.ticks[i]), ya.ticks[i], ya.labels[i]);

  // The stacked areas: each category's path runs along its top edge left to right, then back along
  // its bottom edge (the previous category's top).
  std::vector<double> base(pts.size(), 0.0);
  for (Category c : drawn) {
    std::string upper, lower;
    std::vector<double> next(base);
    for (size_t k = 0; k < pts.size(); ++k) {
      next[k] += double((*pts[k].live)[size_t(c)]);
      upper += std::string(k ? " L " : "M ") + num(pts[k].x) + " " + num(sy(next[k]));
    }
    for (size_t k = pts.size(); k-- > 0;) lower += " L " + num(pts[k].x) + " " + num(sy(base[k]));
    const CategoryStyle& st = style(c);
    s += "<path class=\"layer\" data-category=\"" + std::string(category_name(c)) + "\" d=\"" + upper + lower +
         " Z\" fill=\"" + st.colour + "\" fill-opacity=\"0.9\" stroke=\"#333\" stroke-width=\"0.6\" "
         "stroke-linejoin=\"round\"><title>" + xml_escape(st.label) + "</title></path>\n";
    base = std::move(next);
  }
  s += svg::plot_frame(p, 0, double(n), ya.ticks.front(), ya.ticks.back());

  // x ticks: the event numbers (as remat trace numbers them: sample i is event i), thinned to fit,
  // with each event's short tag under it when every tag fits.
  const double label_w = svg::text_width(std::to_string(n), 12) + 8;
  int every = 1;
  for (int m : {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000})
    if (dx * m >= label_w) { every = m; break; }
  bool tags = dx >= 30;
  for (size_t i = 0; i < n; ++i)
    if (svg::text_width(event_tag(samples[i]), 10) + 2 > dx) tags = false;
  for (size_t i = 0; i < n; ++i) {
    if (i % size_t(every) == 0) s += svg::xtick(p, centre(i), double(i), std::to_string(i), false);
    if (tags) s += svg::text(centre(i), p.y1 + 33, event_tag(samples[i]), 10, "middle", "class=\"tag\" fill=\"#666\"");
  }
  s += svg::axis_titles(p, tags ? "event of one step (F forward, R recompute, B backward of block i)" : "event of one step",
                        "live bytes", tags ? 56 : 44);

  // Hover: one invisible column per event with its name and live bytes (no script: <title>).
  for (size_t i = 0; i < n; ++i) {
    std::string tip = std::to_string(i) + ": " + samples[i].event;
    for (auto it = drawn.rbegin(); it != drawn.rend(); ++it)
      tip += "\n" + std::string(style(*it).label) + " " + format_bytes(samples[i].live[size_t(*it)]);
    if (const auto* h = high_of(samples[i]))
      tip += "\nhighest during the event: " + format_bytes(timeline_top(*h, opt.persistent));
    s += "<rect class=\"event\" x=\"" + num(p.x0 + dx * double(i)) + "\" y=\"" + num(p.y0) + "\" width=\"" + num(dx) +
         "\" height=\"" + num(p.y1 - p.y0) + "\" fill=\"transparent\"><title>" + xml_escape(tip) + "</title></rect>\n";
  }

  svg::LabelPlacer placer{{p.x0 + 2, p.y0 + 18, p.x1 - 2, p.y1 - 2}, {}};
  if (n) {
    // The top of the stack at its highest: a solid line across the plot and a wedge on the point.
    const double tx = pts[top_at].x, ty = sy(double(top));
    s += "<g class=\"top\" data-bytes=\"" + std::to_string(top) + "\" data-event=\"" + std::to_string(pts[top_at].event) +
         "\"><line x1=\"" + num(p.x0) + "\" y1=\"" + num(ty) + "\" x2=\"" + num(p.x1) + "\" y2=\"" + num(ty) +
         "\" stroke=\"#8b0000\" stroke-width=\"1.2\"/><path d=\"M " + num(tx) + " " + num(ty) + " m -5 -7 h 10 l -5 7 z\" "
         "fill=\"#8b0000\"/>";
    placer.taken.push_back({tx - 6, ty - 8, tx + 6, ty});
    s += placer.place(tx, ty - 4, 5, std::string(top_name) + " " + format_bytes(top) + " (event " +
                                         std::to_string(pts[top_at].event) + ")",
                      12, "class=\"label\" font-weight=\"bold\" fill=\"#8b0000\"", 6) +
         "</g>\n";
    // The activation peak: a dashed line at its height across the plot and a dot on the point.
    double below = 0;  // the persistent base under the activations at that point
    for (Category c : drawn)
      if (is_persistent(c)) below += double((*pts[peak_at].live)[size_t(c)]);
    const double px = pts[peak_at].x, py = sy(below + double(peak));
    s += "<g class=\"peak\" data-bytes=\"" + std::to_string(peak) + "\" data-event=\"" +
         std::to_string(pts[peak_at].event) + "\"><line x1=\"" + num(p.x0) + "\" y1=\"" + num(py) + "\" x2=\"" +
         num(p.x1) + "\" y2=\"" + num(py) + "\" stroke=\"#222\" stroke-width=\"1\" stroke-dasharray=\"4 3\"/><circle cx=\"" +
         num(px) + "\" cy=\"" + num(py) + "\" r=\"4\" fill=\"#222\"/>";
    placer.taken.push_back({px - 4, py - 4, px + 4, py + 4});
    s += placer.place(px, py, 4, "peak activations " + format_bytes(peak) + " (event " +
                                     std::to_string(pts[peak_at].event) + ")",
                      12, "class=\"label\" font-weight=\"bold\" fill=\"#222\"", 6) +
         "</g>\n";
  }
  Box b{};
  s += svg::legend(p.x1 + 14, p.y0, rows, lw, &b);
  return s + "</svg>\n";
}

}  // namespace remat
