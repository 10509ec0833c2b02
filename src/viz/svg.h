// Pictures as plain SVG documents (no scripts, no external resources): the memory / compute frontier
// of `remat plan --frontier --svg` and the live-memory timeline of one step (`remat trace --svg`).
// Every label is XML-escaped; the drawings are sized for 900 x 560.
#pragma once
#include <array>
#include <string>
#include <vector>

#include "core/allocator.h"

namespace remat {

struct SvgPoint {
  double bytes = 0;     // predicted peak memory
  double overhead = 1;  // predicted step time relative to store-everything
  std::string label;
  enum class Kind { Frontier, Textbook, Chosen } kind = Kind::Frontier;
};

// A plain SVG document, no scripts: predicted peak memory (x, bytes, labelled in KiB/MiB/GiB) against
// predicted step time relative to store-everything (y, "1.00x"...). Frontier points joined as a
// Pareto staircase; textbook strategies as labelled markers; the chosen plan highlighted; axes,
// ticks, title, legend.
std::string frontier_svg(const std::vector<SvgPoint>& points, const std::string& title);

// One event of a traced step: what ran, in which phase, and the live bytes of every allocator
// category right after it.
struct TimelineSample {
  enum class Phase { Forward, Recompute, Backward };
  std::string event;
  Phase phase = Phase::Forward;
  std::array<size_t, kNumCategories> live{};
};

struct TimelineOptions {
  // Draw parameters, gradients, optimizer state and data as a flat base under the activations.
  bool persistent = false;
  std::string title;
};

// The categories a timeline stacks, bottom to top (persistent ones first, used only when
// TimelineOptions::persistent is set).
std::vector<Category> timeline_categories(bool persistent);
// The top of the stack at one sample: the sum of the stacked categories.
size_t timeline_top(const TimelineSample& s, bool persistent);

// A plain SVG document, no scripts: live bytes per category as stacked areas over the events of one
// step (x: event index, y: bytes), forward / recompute / backward phases shaded behind, and the
// peak marked with its value.
std::string timeline_svg(const std::vector<TimelineSample>& samples, const TimelineOptions& opt);

// "a < b & "c"" -> "a &lt; b &amp; &quot;c&quot;" (also ' and >).
std::string xml_escape(const std::string& s);

}  // namespace remat
