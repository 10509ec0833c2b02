// `remat trace --svg`: the picture of one step's live memory. Its activation peak is the step's
// measured peak, to the byte, under every strategy; with --svg-persistent every category is drawn
// and the top of the stack is the whole step's measured peak (AdamW's moments, the data and the
// workspace included), as the dry run predicts it; the title is whole and no text overlaps another;
// a bad --svg path is refused before the step runs, with a one-line error.
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <string>
#include <vector>

#include "run.h"
#include "train/svg_geometry.h"
#include "train/svg_xml.h"

namespace {

using namespace remat_cli_test;
using svg_xml::Node;

bool has(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

struct Traced {
  std::string out;
  size_t measured = 0;     // "measured peak activation N bytes"
  size_t whole_step = 0;   // "..., whole step N bytes"
  std::vector<std::string> live;  // the text trace's "activations live" column, event by event
  std::unique_ptr<Node> svg;
};

Traced trace(const std::vector<std::string>& extra, const TempDir& dir) {
  std::vector<std::string> args{"trace", "--svg", dir / "t.svg"};
  if (std::find(extra.begin(), extra.end(), "--layers") == extra.end()) args.insert(args.end(), {"--layers", "3"});
  args.insert(args.end(), extra.begin(), extra.end());
  const RunResult r = run_remat(args);
  EXPECT_TRUE(r.exited() && r.exit_code == 0) << r.describe();
  Traced t;
  t.out = r.out;
  std::smatch m;
  EXPECT_TRUE(std::regex_search(r.out, m, std::regex("wrote \\S+: ([0-9]+) events; measured peak activation ([0-9]+) bytes, "
                                                   "whole step ([0-9]+) bytes")))
      << r.out;
  if (!m.empty()) t.measured = std::stoull(m[2]), t.whole_step = std::stoull(m[3]);
  for (const auto& line : split_lines(r.out)) {
    std::smatch l;
    if (std::regex_match(line, l, std::regex("^ *[0-9]+  .*activations live +(\\S+ \\S+)$"))) t.live.push_back(l[1]);
  }
  EXPECT_FALSE(fs::exists(dir / "t.svg.tmp")) << "no temporary file left";
  try {
    t.svg = svg_xml::parse(slurp(dir / "t.svg"));
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
    t.svg = std::make_unique<Node>();
  }
  return t;
}

// The stacked layers' top edges (the first half of each path's points), in bytes through the y
// ticks: [layer][point].
std::vector<std::vector<double>> layer_tops(const Node& root, std::vector<std::string>* names) {
  const svg_xml::AxisMap ym = svg_xml::axis_map(root, false);
  std::vector<std::vector<double>> tops;
  for (const Node* p : root.with_class("layer")) {
    names->push_back(p->attr("data-category"));
    std::vector<double> all;
    for (const auto& c : svg_xml::path_commands(p->attr("d")))
      if (c.cmd != 'Z') all.push_back(ym.value(c.args.at(1)));
    tops.push_back(std::vector<double>(all.begin(), all.begin() + long(all.size() / 2)));
  }
  return tops;
}

TEST(CliTraceSvg, TimelinePeakIsTheMeasuredPeakUnderEveryStrategy) {
  for (const std::vector<std::string>& extra : std::vector<std::vector<std::string>>{
           {"--recompute", "none"},
           {"--recompute", "block"},
           {"--recompute", "block", "--recompute-last"},
           {"--recompute", "all"},
           {"--recompute", "sqrt", "--segment-replay", "internals"},
           {"--recompute", "segments:2,1", "--micro-batch", "4"}}) {
    SCOPED_TRACE(extra[1]);
    TempDir dir;
    const Traced t = trace(extra, dir);
    ASSERT_GT(t.measured, 0u);
    const auto peak = t.svg->with_class("peak");
    ASSERT_EQ(peak.size(), 1u);
    EXPECT_EQ(peak[0]->attr("data-bytes"), std::to_string(t.measured)) << t.out;
    // One sample for the start of the step, then one per event of the text trace.
    const auto events = t.svg->with_class("event");
    EXPECT_EQ(events.size(), t.live.size() + 1);
    // The geometry agrees: the top of the activation layers (checkpoints, saved, recompute: the
    // bottom of the default stack) reaches the measured peak at its highest, within a pixel's rounding.
    std::vector<std::string> names;
    const auto tops = layer_tops(*t.svg, &names);
    int last_act = -1;
    for (size_t k = 0; k < names.size(); ++k)
      if (names[k] == "checkpoint" || names[k] == "saved_activation" || names[k] == "recompute") last_act = int(k);
    ASSERT_GE(last_act, 0);
    double highest = 0;
    for (double v : tops[size_t(last_act)]) highest = std::max(highest, v);
    const svg_xml::AxisMap ym = svg_xml::axis_map(*t.svg, false);
    EXPECT_NEAR(highest, double(t.measured), std::abs(ym.value(0.011) - ym.value(0)));
    // No parameters by default: the stack starts at zero.
    for (const auto& n : names) EXPECT_NE(n, "parameter");
    for (const std::string& p : svg_geometry::text_problems(*t.svg)) ADD_FAILURE() << p;
  }
}

TEST(CliTraceSvg, PersistentBaseIsDrawnOnRequest) {
  TempDir dir;
  const Traced t = trace({"--recompute", "block", "--svg-persistent"}, dir);
  std::vector<std::string> names;
  layer_tops(*t.svg, &names);
  ASSERT_GE(names.size(), 2u);
  EXPECT_EQ(names[0], "parameter");
  EXPECT_EQ(names[1], "gradient");
  const auto peak = t.svg->with_class("peak");
  ASSERT_EQ(peak.size(), 1u);
  EXPECT_EQ(peak[0]->attr("data-bytes"), std::to_string(t.measured));
}

// With the base, the stack holds every category the step holds: its top at its highest is the whole
// step's measured peak (the stack drew 20 of a 28.14 MiB step when AdamW's moments, the data and the
// workspace were left out), which the dry run predicts to the byte, with accumulation too.
TEST(CliTraceSvg, PersistentTopIsTheWholeStep) {
  for (const std::vector<std::string>& extra : std::vector<std::vector<std::string>>{
           {"--layers", "4", "--recompute", "block"},
           {"--recompute", "none", "--micro-batch", "4"},
           {"--recompute", "sqrt", "--attention", "flash"}}) {
    SCOPED_TRACE(extra[1]);
    TempDir dir;
    std::vector<std::string> args = extra;
    args.push_back("--svg-persistent");
    const Traced t = trace(args, dir);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(t.out, m, std::regex("whole-step peak (\\S+ \\S+) measured [^\\n]*, (\\S+ \\S+) predicted")))
        << t.out;
    EXPECT_EQ(m[1], m[2]) << t.out;
    ASSERT_GT(t.whole_step, t.measured);
    const auto top = t.svg->with_class("top");
    ASSERT_EQ(top.size(), 1u);
    EXPECT_EQ(top[0]->attr("data-bytes"), std::to_string(t.whole_step));
    std::vector<std::string> names;
    const auto tops = layer_tops(*t.svg, &names);
    for (const char* c : {"parameter", "gradient", "optimizer", "data", "saved_activation"})
      EXPECT_NE(std::find(names.begin(), names.end(), c), names.end()) << c;
    double highest = 0;
    for (double v : tops.back()) highest = std::max(highest, v);
    const svg_xml::AxisMap ym = svg_xml::axis_map(*t.svg, false);
    EXPECT_NEAR(highest, double(t.whole_step), std::abs(ym.value(0.011) - ym.value(0)));
    for (const std::string& p : svg_geometry::text_problems(*t.svg)) ADD_FAILURE() << p;
  }
}

// A plan's title (its file's path and summary) is longer than the canvas is wide: it is wrapped,
// whole, and no text overlaps another or leaves the canvas.
TEST(CliTraceSvg, TitleIsWhole) {
  TempDir dir;
  const std::string plan = dir / "a-plan-file-with-a-rather-long-name.json";
  const RunResult p = run_remat({"plan", "--layers", "4", "--step-budget", "27MiB", "--out", plan});
  ASSERT_TRUE(p.exited() && p.exit_code == 0) << p.describe();
  const Traced t = trace({"--layers", "4", "--plan", plan, "--svg-persistent"}, dir);
  const auto titles = t.svg->with_class("title");
  ASSERT_EQ(titles.size(), 1u);
  const std::string title = titles[0]->raw_text();
  EXPECT_NE(title.find(plan), std::string::npos) << title;
  EXPECT_EQ(title.substr(title.size() - 13), "micro-batch 8") << title;
  for (const std::string& e : svg_geometry::text_problems(*t.svg)) ADD_FAILURE() << e;
}

TEST(CliTraceSvg, PhasesFollowTheEvents) {
  TempDir dir;
  const Traced t = trace({"--recompute", "block"}, dir);
  std::vector<std::string> phases;
  for (const Node* b : t.svg->with_class("phase")) phases.push_back(b->attr("data-phase"));
  // block, L = 3, last segment not recomputed: forward; backward (head, block 2); then per block
  // 1 and 0 a recompute and its backward; then the optimizer step.
  const std::vector<std::string> want{"forward", "backward", "recompute", "backward", "recompute", "backward",
                                      "optimizer"};
  EXPECT_EQ(phases, want) << t.out;
  // Every event's tooltip names it as the text trace does.
  const auto events = t.svg->with_class("event");
  ASSERT_GE(events.size(), 2u);
  EXPECT_TRUE(has(events[0]->child("title")->text, "0: start of step"));
  EXPECT_TRUE(has(events[1]->child("title")->text, "1: forward   embedding"));
  // No scripts.
  EXPECT_FALSE(has(slurp(dir / "t.svg"), "<script"));
}

TEST(CliTraceSvg, BadSvgPathIsRefusedUpFront) {
  TempDir dir;
  const std::string file = dir.write("plain", "x");
  struct Case {
    std::string path;
    std::vector<std::string> needles;
  };
  const std::vector<Case> cases{
      {dir.path(), {"--svg", "is a directory", "regular file"}},
      {dir / "missing/t.svg", {"cannot write --svg", "missing"}},
      {file + "/t.svg", {"cannot write --svg", "plain"}},
  };
  for (const Case& c : cases) {
    const RunResult r = run_remat({"trace", "--layers", "2", "--svg", c.path});
    check_user_error(r, 1, c.needles);
    EXPECT_FALSE(has(r.out, "trace of one step")) << "refused before the step: " << r.out;
  }
  const RunResult r = run_remat({"trace", "--layers", "2", "--svg-persistent"});
  check_user_error(r, 1, {"--svg-persistent needs --svg"});
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"plain"});  // nothing written
}

}  // namespace
