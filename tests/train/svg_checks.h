// Checks the SVG tests share (train/test_svg*.cpp, cli/test_*_svg.cpp): a document parses as SVG, it
// is inert (no script, handler or link), its plot frame, and its ticks step by 1, 2 or 5.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "train/svg_xml.h"

namespace svg_checks {

// A label with every character XML escapes.
inline const std::string kNasty = "a<b & \"c\" 'd' > e";

using svg_xml::Node;

inline std::unique_ptr<Node> parse_ok(const std::string& doc) {
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
inline void expect_inert(const Node& root) {
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

struct Rect {
  double x0, y0, x1, y1;
};
inline Rect plot_rect(const Node& root) {
  const auto plots = root.with_class("plot");
  if (plots.size() != 1) throw std::runtime_error("expected one plot frame");
  const Node& p = *plots[0];
  return {p.num("x"), p.num("y"), p.num("x") + p.num("width"), p.num("y") + p.num("height")};
}

// Tick values step by 1, 2 or 5 times a power of ten (in the axis' unit), with distinct labels.
inline void expect_nice(const Node& root, const std::string& cls, double unit) {
  const auto ticks = root.with_class(cls);
  ASSERT_GE(ticks.size(), 3u) << cls;
  const double step = (ticks[1]->num("data-value") - ticks[0]->num("data-value")) / unit;
  const double norm = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
  EXPECT_TRUE(std::abs(norm - 1) < 1e-6 || std::abs(norm - 2) < 1e-6 || std::abs(norm - 5) < 1e-6)
      << cls << " step " << step;
  for (size_t i = 1; i < ticks.size(); ++i) {
    EXPECT_NEAR((ticks[i]->num("data-value") - ticks[i - 1]->num("data-value")) / unit, step, step * 1e-6) << cls;
    EXPECT_NE(ticks[i]->all_text(), ticks[i - 1]->all_text()) << cls;
  }
}

}  // namespace svg_checks
