// Pictures as plain SVG documents (no scripts, no external resources): the memory / compute frontier
// of `remat plan --svg` and the live-memory timeline of one step (`remat trace --svg`). Every label is
// XML-escaped; the drawings are 900 x 560 (viz/svg_canvas.h draws what they share). No label overlaps
// another or leaves the canvas, and no marker hides another.
#pragma once
#include <array>
#include <optional>
#include <string>
#include <vector>

#include "core/allocator.h"

namespace remat {

struct SvgPoint {
  double bytes = 0;  // x: predicted whole-step peak
  double cost = 1;   // y: what FrontierOptions::cost says
  std::string label;
  // Least: the plan of least whole-step peak, marked when the budget cannot be met.
  enum class Kind { Frontier, Textbook, Chosen, Least } kind = Kind::Frontier;
};

struct FrontierOptions {
  std::string title;
  // What the y axis plots: a ratio ("1.25x") or seconds ("120 ms"), and its title, which says exactly
  // what that is (FLOPs relative to store-everything's, or calibrated seconds of one step).
  enum class Cost { Ratio, Seconds } cost = Cost::Ratio;
  std::string cost_title = "predicted FLOPs / store-everything's";
  std::string bytes_title = "predicted whole-step peak memory";
  // The budget, drawn as a vertical line; `budget_met` false: no plan fits it (the Least point then
  // marks the least whole-step peak any plan has).
  std::optional<double> budget;
  bool budget_met = true;
};

// A plain SVG document, no scripts: predicted whole-step peak (x, bytes, labelled in KiB/MiB/GiB)
// against the cost (y). Frontier points joined as a Pareto staircase; textbook strategies as
// labelled markers; the chosen plan highlighted; the budget as a line; axes, ticks, title, legend.
std::string frontier_svg(const std::vector<SvgPoint>& points, const FrontierOptions& opt);

// One event of a traced step: what ran, in which phase, and the live bytes of every allocator
// category right after it.
struct TimelineSample {
  enum class Phase { Forward, Recompute, Backward, Optimizer };
  std::string event;
  Phase phase = Phase::Forward;
  std::array<size_t, kNumCategories> live{};
  // The live bytes of every category at the highest total during the event (transients and workspace
  // that come and go inside it), when known and above `live`'s total: drawn as a point of its own
  // between the event's start and its end.
  std::optional<std::array<size_t, kNumCategories>> high;
};

struct TimelineOptions {
  // Draw parameters, gradients, optimizer state and data as a base under the activations: every
  // category, so that the top of the stack at its highest is the whole step's peak.
  bool persistent = false;
  std::string title;
};

// The categories a timeline stacks, bottom to top (persistent ones first, used only when
// TimelineOptions::persistent is set).
std::vector<Category> timeline_categories(bool persistent);
// The top of the stack: the sum of the stacked categories of `live`.
size_t timeline_top(const std::array<size_t, kNumCategories>& live, bool persistent);
inline size_t timeline_top(const TimelineSample& s, bool persistent) { return timeline_top(s.live, persistent); }

// A plain SVG document, no scripts: live bytes per category as stacked areas over the events of one
// step (x: event index, y: bytes), forward / recompute / backward / optimizer phases shaded behind,
// the activation peak marked with its value, and the top of the stack at its highest.
std::string timeline_svg(const std::vector<TimelineSample>& samples, const TimelineOptions& opt);

// "a < b & "c"" -> "a &lt; b &amp; &quot;c&quot;" (also ' and >).
std::string xml_escape(const std::string& s);

}  // namespace remat
