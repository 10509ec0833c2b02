// The drawing the SVG pictures share (viz/svg.h): numbers, text and its measure, boxes, axes, the
// legend, and a label placer that never lets a label overlap another or leave the canvas. Text is
// measured with DejaVu Sans' own advance widths (the first font the pictures ask for, and the widest
// of them), so a layout that fits here fits in a browser that falls back to Helvetica or Arial.
#pragma once
#include <string>
#include <vector>

namespace remat::svg {

constexpr double kWidth = 900, kHeight = 560;  // every picture's canvas, in px

// A coordinate or value, at most `decimals` digits after the point, trailing zeros dropped.
std::string num(double v, int decimals = 2);

// The advance width of `s` in DejaVu Sans (Bold when `bold`) at `size` px: the font's own widths for
// ASCII, 1 em (its widest) for any other character.
double text_width(const std::string& s, double size, bool bold = false);

struct Box {
  double x0, y0, x1, y1;
  bool overlaps(const Box& o) const { return x0 < o.x1 && o.x0 < x1 && y0 < o.y1 && o.y0 < y1; }
  bool inside(const Box& o) const { return x0 >= o.x0 && x1 <= o.x1 && y0 >= o.y0 && y1 <= o.y1; }
};
constexpr Box kCanvas{0, 0, kWidth, kHeight};

// The ink of one line of text with its baseline at (x, y) and text-anchor `anchor` (start, middle or
// end): from 0.8 em above the baseline to 0.25 em below (DejaVu Sans' ascent and descent, rounded up).
Box text_box(double x, double y, const std::string& s, double size, const std::string& anchor, bool bold = false);

// One <text> element; `extra` is more attributes. Bold when `extra` says font-weight="bold".
std::string text(double x, double y, const std::string& s, double size, const std::string& anchor,
                 const std::string& extra = "");
// Text with a white halo, readable over lines and areas.
std::string halo_text(double x, double y, const std::string& s, double size, const std::string& anchor,
                      const std::string& extra = "");

// Several lines as one <text> of <tspan>s, each with its own x and y (first baseline at y, then every
// 1.2 em), so that the element's text is the lines joined.
std::string text_lines(double x, double y, const std::vector<std::string>& lines, double size, const std::string& anchor,
                       const std::string& extra);
Box lines_box(double x, double y, const std::vector<std::string>& lines, double size, const std::string& anchor,
              bool bold = false);

// `s` in lines of at most `max_width` px, broken after spaces; joined, the lines are `s`. Past
// `max_lines`, the last line is cut at a whole character and ends in an ellipsis (callers keep the
// whole text in a tooltip).
std::vector<std::string> wrap(const std::string& s, double size, double max_width, int max_lines, bool bold = false);

// Ticks at 1, 2 or 5 times a power of ten, about `target` of them, covering [lo, hi]: the first tick
// is at or below lo and the last at or above hi, so the axis range is [front, back].
std::vector<double> nice_ticks(double lo, double hi, int target);

// An axis' ticks (in the plotted unit) and their labels.
struct Axis {
  std::vector<double> ticks;
  std::vector<std::string> labels;
};
// Bytes, labelled in the unit of the largest ("0", "5 MiB", "10 MiB").
Axis bytes_axis(double lo, double hi, int target);
// Ratios, labelled "1.25x" (at least two decimals).
Axis ratio_axis(double lo, double hi, int target);
// Seconds, labelled in ms below a second ("120 ms"), else in s.
Axis seconds_axis(double lo, double hi, int target);

// The document's start: XML prolog, <svg> of the canvas' size, its <title>, a white background.
std::string svg_open(const std::string& title);
// The title in bold across the top, wrapped onto as many lines as it needs, never cut; *bottom is the
// y just below its last line.
std::string title_text(const std::string& title, double* bottom);

// A linear map from a value range onto a pixel range.
struct Scale {
  double v0, v1, p0, p1;
  double operator()(double v) const { return p0 + (v - v0) / (v1 - v0) * (p1 - p0); }
};

struct Plot {
  double x0, y0, x1, y1;
};
// The plot's frame (class plot), with the value ranges it spans as data- attributes.
std::string plot_frame(const Plot& p, double vx0, double vx1, double vy0, double vy1);
// Grid line, tick mark and label of one x tick (class xtick) or y tick (class ytick).
std::string xtick(const Plot& p, double x, double value, const std::string& label, bool grid);
std::string ytick(const Plot& p, double y, double value, const std::string& label);
// The x axis' title centred `x_offset` below the plot; the y axis' rotated, left of the tick labels.
std::string axis_titles(const Plot& p, const std::string& x, const std::string& y, double x_offset = 44);

// Legend rows: a swatch and a label.
struct LegendRow {
  std::string swatch;  // SVG with placeholders: {X}, {Y} the cell centre, {X0} {X1} the ends of a line swatch
  std::string label;
};
std::string legend(double x, double y, const std::vector<LegendRow>& rows, double width, Box* box);
double legend_width(const std::vector<LegendRow>& rows);
double legend_height(const std::vector<LegendRow>& rows);

// Labels placed one by one where they overlap nothing placed before (markers, legend, other labels)
// and stay inside `area`.
struct LabelPlacer {
  Box area;
  std::vector<Box> taken;
  // A label for a marker at (x, y) of radius r: beside it (right, left, above, below, the diagonals),
  // then further out on up to `rings` rings, with a leader line from the marker when it sits away.
  // Wrapped onto up to two lines of at most `max_width` px. Returns "" when no free place is found:
  // the label is then not drawn (it stays in the marker's tooltip). `extra`: more attributes.
  std::string place(double x, double y, double r, const std::string& label, double size, const std::string& extra,
                    int rings, double max_width = 300);
};

}  // namespace remat::svg
