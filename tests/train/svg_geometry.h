// What an SVG picture puts on the canvas, read back from the document (svg_xml.h) for the tests that
// no text overlaps another or leaves the canvas and that no marker hides another: the box of every
// line of text, measured as viz/svg_canvas.h measures text (DejaVu Sans' widths; the y axis' rotated
// title turned), and the markers of the frontier's points as circles of ink.
#pragma once
#include <cmath>
#include <regex>
#include <string>
#include <vector>

#include "train/svg_xml.h"
#include "viz/svg_canvas.h"

namespace svg_geometry {

using remat::svg::Box;

struct TextInk {
  std::string text;
  Box box;
};

// Every line of text: a <text>, or each of its <tspan>s.
inline std::vector<TextInk> text_boxes(const svg_xml::Node& root) {
  std::vector<TextInk> out;
  for (const svg_xml::Node* t : root.all("text")) {
    const double size = t->num("font-size");
    const std::string anchor = t->attr("text-anchor").empty() ? "start" : t->attr("text-anchor");
    const bool bold = t->attr("font-weight") == "bold";
    std::vector<std::pair<const svg_xml::Node*, std::string>> lines;  // (node with x and y, its text)
    if (t->children.empty()) lines.push_back({t, t->text});
    for (const auto& c : t->children)
      if (c->name == "tspan") lines.push_back({c.get(), c->text});
    for (const auto& [n, s] : lines) {
      Box b = remat::svg::text_box(n->num("x"), n->num("y"), s, size, anchor, bold);
      std::smatch m;
      const std::string tr = t->attr("transform");
      if (std::regex_match(tr, m, std::regex("translate\\(([-0-9.]+) ([-0-9.]+)\\) rotate\\(-90\\)"))) {
        // (x, y) turns to (y, -x), then moves by the translation.
        const double tx = std::stod(m[1]), ty = std::stod(m[2]);
        b = {tx + b.y0, ty - b.x1, tx + b.y1, ty - b.x0};
      } else if (!tr.empty()) {
        throw std::runtime_error("unexpected transform on a text: " + tr);
      }
      out.push_back({s, b});
    }
  }
  return out;
}

// Texts that overlap another or leave the canvas, described; empty when there are none.
inline std::vector<std::string> text_problems(const svg_xml::Node& root) {
  std::vector<std::string> bad;
  const std::vector<TextInk> ink = text_boxes(root);
  auto where = [](const TextInk& t) {
    return "'" + t.text + "' [" + std::to_string(t.box.x0) + ", " + std::to_string(t.box.y0) + " - " +
           std::to_string(t.box.x1) + ", " + std::to_string(t.box.y1) + "]";
  };
  for (size_t i = 0; i < ink.size(); ++i) {
    if (ink[i].text.empty()) continue;
    if (!ink[i].box.inside(remat::svg::kCanvas)) bad.push_back("outside the canvas: " + where(ink[i]));
    for (size_t j = i + 1; j < ink.size(); ++j)
      if (!ink[j].text.empty() && ink[i].box.overlaps(ink[j].box))
        bad.push_back("overlap: " + where(ink[i]) + " and " + where(ink[j]));
  }
  return bad;
}

// A point marker (<g class="point ...">) as circles of ink: its centre, the radius of a circle
// holding it and of the circle it holds (equal for a circle; a diamond's and a square's differ by
// sqrt 2), and whether it is only an outline.
struct MarkerInk {
  std::string kind, label;
  double x, y, outer, inner;
  bool hollow;
};
inline std::vector<MarkerInk> markers(const svg_xml::Node& root) {
  std::vector<MarkerInk> out;
  for (const svg_xml::Node* g : root.with_class("point")) {
    MarkerInk m{};
    for (const char* k : {"frontier", "textbook", "chosen", "least"})
      if (g->has_class(k)) m.kind = k;
    m.label = g->child("title") ? g->child("title")->text : "";
    if (const svg_xml::Node* c = g->child("circle")) {
      m.x = c->num("cx"), m.y = c->num("cy"), m.outer = m.inner = c->num("r");
      m.hollow = c->attr("fill") == "none";
    } else if (const svg_xml::Node* p = g->child("path")) {
      std::vector<std::pair<double, double>> v;
      for (const auto& cmd : svg_xml::path_commands(p->attr("d")))
        if (cmd.cmd == 'M' || cmd.cmd == 'L') v.push_back({cmd.args.at(0), cmd.args.at(1)});
      for (const auto& [x, y] : v) m.x += x / double(v.size()), m.y += y / double(v.size());
      const bool diamond = std::abs(v.at(0).first - m.x) < 1e-6;  // its first vertex straight above the centre
      const double half = diamond ? std::abs(v[0].second - m.y) : std::abs(v[0].first - m.x);
      m.outer = diamond ? half : half * std::sqrt(2.0);
      m.inner = diamond ? half / std::sqrt(2.0) : half;
      m.hollow = p->attr("fill") == "none";
    } else {
      throw std::runtime_error("a point without a marker");
    }
    out.push_back(m);
  }
  return out;
}

// Markers another drawn after it hides, described; empty when there are none. A filled marker over
// part of another hides it; an outline hides nothing unless it traces another outline at the same
// place and size. Frontier dots may overlap one another: a long chain's frontier has plans closer
// than a pixel apart on both axes, all on the staircase (each has its tooltip).
inline std::vector<std::string> hidden_markers(const svg_xml::Node& root) {
  std::vector<std::string> bad;
  const std::vector<MarkerInk> ms = markers(root);
  for (size_t i = 0; i < ms.size(); ++i)
    for (size_t j = i + 1; j < ms.size(); ++j) {
      const MarkerInk &a = ms[i], &b = ms[j];  // b drawn over a
      const double d = std::hypot(a.x - b.x, a.y - b.y);
      if (d >= a.outer + b.outer - 0.02) continue;  // apart
      const bool ok = a.kind == "frontier" && b.kind == "frontier" ? true
                      : b.hollow ? !(a.hollow && d < 1.0 && std::abs(a.outer - b.outer) < 2.0)
                                 : false;
      if (!ok) bad.push_back(b.kind + " '" + b.label + "' over " + a.kind + " '" + a.label + "'");
    }
  return bad;
}

}  // namespace svg_geometry
