// `remat plan --svg`: the frontier picture says what it plots (FLOPs relative to store-everything's,
// or with --calibration seconds, never "time" for a FLOP count); its frontier is the list
// `--frontier` prints, Pareto on what is drawn (whole-step bytes and cost); the budget is drawn, and a
// budget no plan meets still draws, with the least whole-step peak marked, before the command fails;
// no text overlaps another or leaves the canvas, and no marker hides another.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "run.h"
#include "train/svg_geometry.h"
#include "train/svg_xml.h"

namespace {

using namespace remat_cli_test;
using json = nlohmann::json;
using svg_xml::Node;

RunResult ok(const std::vector<std::string>& args) {
  RunResult r = run_remat(args);
  EXPECT_TRUE(r.exited() && r.exit_code == 0) << r.describe();
  return r;
}

std::unique_ptr<Node> parse(const std::string& path) {
  try {
    return svg_xml::parse(slurp(path));
  } catch (const std::exception& e) {
    ADD_FAILURE() << path << ": " << e.what();
    return std::make_unique<Node>();
  }
}

std::vector<std::string> axis_titles(const Node& root) {
  std::vector<std::string> t;
  for (const Node* n : root.with_class("axis-title")) t.push_back(n->all_text());
  return t;
}

void expect_clean(const Node& root, const std::string& what) {
  for (const std::string& p : svg_geometry::text_problems(root)) ADD_FAILURE() << what << ": " << p;
  for (const std::string& p : svg_geometry::hidden_markers(root)) ADD_FAILURE() << what << ": " << p;
}

// (bytes, cost) of the points of one kind.
std::multiset<std::pair<size_t, double>> points(const Node& root, const std::string& kind) {
  std::multiset<std::pair<size_t, double>> out;
  for (const Node* g : root.with_class(kind)) out.insert({size_t(g->num("data-bytes")), g->num("data-cost")});
  return out;
}

const std::vector<std::string> kFour{"plan", "--layers", "4"};  // the reviewer's model
std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& more) {
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

// Without a calibration the y axis is FLOPs over store-everything's, each point at its row's FLOPs
// over none's; with one, seconds of one optimizer step, each point at its row's seconds.
TEST(PlanSvg, AxesSayWhatTheyPlot) {
  TempDir d;
  const json j = json::parse(ok(with(kFour, {"--frontier", "--json", "--svg", d / "f.svg"})).out);
  const auto root = parse(d / "f.svg");
  const std::vector<std::string> titles = axis_titles(*root);
  ASSERT_EQ(titles.size(), 2u);
  EXPECT_EQ(titles[1], "predicted FLOPs / store-everything's (naive attention)");
  EXPECT_EQ(titles[0].rfind("predicted whole-step peak", 0), 0u) << titles[0];
  for (const std::string& t : titles) EXPECT_EQ(t.find("time"), std::string::npos) << t;
  const double none = j.at("textbook").at(0).at("predicted_flops");
  std::multiset<std::pair<size_t, double>> want;
  for (const json& r : j.at("frontier")) {
    const double ratio = r.at("predicted_flops").get<double>() / none;
    want.insert({r.at("predicted_step_bytes").get<size_t>(), std::round(ratio * 1e6) / 1e6});
  }
  EXPECT_EQ(points(*root, "frontier"), want);

  // A calibration (synthetic seconds, as in test_plan_cli's CalibratedPlanning): seconds.
  const std::string cal = d / "cal.json";
  ok({"calibrate", "--preset", "tiny", "--repeats", "1", "--untimed-rounds", "0", "--quiet", "--out", cal});
  json c = json::parse(slurp(cal));
  c.update({{"embed_forward", 0.007}, {"head_forward", 0.011}, {"head_backward", 0.013}, {"embed_backward", 0.005},
            {"rest", 0.017}, {"forward_pass", 0.1}, {"recompute_pass", 0.06}, {"free_checkpoint", 0.003}});
  for (json& p : c["policies"])
    p.update({{"forward_store", 0.2}, {"recompute_store", 0.13}, {"backward_stored", 0.38}, {"backward_replayed", 0.29}});
  d.write("cal.json", c.dump());
  const json jc = json::parse(ok({"plan", "--preset", "tiny", "--calibration", cal, "--frontier", "--json", "--svg",
                                  d / "c.svg"}).out);
  const auto rc = parse(d / "c.svg");
  const std::vector<std::string> tc = axis_titles(*rc);
  ASSERT_EQ(tc.size(), 2u);
  EXPECT_EQ(tc[1], "predicted seconds of one optimizer step (calibrated)");
  for (const Node* t : rc->with_class("ytick"))
    EXPECT_TRUE(std::regex_match(t->all_text(), std::regex("0|[0-9.]+ (ms|s)"))) << t->all_text();
  want.clear();
  for (const json& r : jc.at("frontier"))
    want.insert({r.at("predicted_step_bytes").get<size_t>(), std::round(r.at("predicted_step_seconds").get<double>() * 1e6) / 1e6});
  EXPECT_EQ(points(*rc, "frontier"), want);
  expect_clean(*rc, "calibrated");
}

// The list --frontier prints is the set drawn, and no plan in it is beaten on both whole-step bytes
// and FLOPs by another plan or a textbook strategy of the planner's (flash is one only with
// --attention auto).
TEST(PlanSvg, FrontierIsTheListedSetAndPareto) {
  for (const std::vector<std::string>& model : std::vector<std::vector<std::string>>{
           kFour, {"plan", "--preset", "tiny"}, {"plan", "--preset", "tiny", "--attention", "auto"}}) {
    SCOPED_TRACE(model.back());
    TempDir d;
    const json j = json::parse(ok(with(model, {"--frontier", "--json", "--svg", d / "f.svg"})).out);
    const auto root = parse(d / "f.svg");
    const json& fr = j.at("frontier");
    EXPECT_EQ(root->with_class("frontier").size(), fr.size());
    const bool autoflash = model.back() == "auto";
    for (const json& f : fr)
      for (const char* list : {"frontier", "textbook"})
        for (const json& q : j.at(list)) {
          if (!autoflash && q.at("label") == "flash") continue;
          const size_t fb = f.at("predicted_step_bytes"), qb = q.at("predicted_step_bytes");
          const double fc = f.at("predicted_flops"), qc = q.at("predicted_flops");
          EXPECT_FALSE(qb <= fb && qc <= fc && (qb < fb || qc < fc))
              << q.at("label") << " (" << qb << " B, " << qc << ") beats " << f.at("label") << " (" << fb << " B, " << fc << ")";
        }
  }
}

// The budget is a line at its bytes and the chosen plan is a frontier point; a budget no plan meets
// still draws (the least whole-step peak marked, the one the refusal names), then fails as before.
TEST(PlanSvg, BudgetIsDrawnMetOrNot) {
  TempDir d;
  ok(with(kFour, {"--step-budget", "28MiB", "--svg", d / "f.svg"}));
  auto root = parse(d / "f.svg");
  auto line = root->with_class("budget");
  ASSERT_EQ(line.size(), 1u);
  EXPECT_EQ(line[0]->attr("data-bytes"), std::to_string(size_t(28) << 20));
  const auto chosen = points(*root, "chosen");
  ASSERT_EQ(chosen.size(), 1u);
  EXPECT_EQ(points(*root, "frontier").count(*chosen.begin()), 1u) << "the chosen plan is on the frontier";
  EXPECT_LE(chosen.begin()->first, size_t(28) << 20);
  expect_clean(*root, "28MiB");

  const RunResult r = run_remat(with(kFour, {"--step-budget", "20MiB", "--svg", d / "g.svg"}));
  const std::string err = check_user_error(r, 1, {"[budget]", "least whole-step peak of any plan"});
  EXPECT_TRUE(r.out.find("frontier drawn in " + d / "g.svg") != std::string::npos) << r.out;
  root = parse(d / "g.svg");
  line = root->with_class("budget");
  ASSERT_EQ(line.size(), 1u);
  EXPECT_EQ(line[0]->attr("data-bytes"), std::to_string(size_t(20) << 20));
  const auto least = root->with_class("least");
  ASSERT_EQ(least.size(), 1u);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(err, m, std::regex("least whole-step peak of any plan, ([0-9.]+ [KMG]iB)")));
  EXPECT_NE(least[0]->child("title")->text.find("least whole-step peak " + std::string(m[1])), std::string::npos)
      << least[0]->child("title")->text;
  EXPECT_TRUE(root->with_class("chosen").empty());
  expect_clean(*root, "20MiB");
  EXPECT_FALSE(fs::exists(d / "g.svg.tmp"));
}

// Every picture remat plan draws for these models keeps its texts apart and inside, and no marker
// (selective's and flash's, say) under another.
TEST(PlanSvg, NoTextOverlapsAndNoMarkerHides) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           with(kFour, {"--step-budget", "28MiB"}),
           with(kFour, {"--step-budget", "45MiB", "--frontier"}),
           {"plan", "--preset", "tiny", "--step-budget", "6MiB"},
           {"plan", "--preset", "small", "--attention", "auto", "--step-budget", "300MiB"},
           {"plan", "--preset", "llama-tiny", "--batch", "4", "--micro-batch", "2"}}) {
    TempDir d;
    ok(with(args, {"--svg", d / "f.svg"}));
    const auto root = parse(d / "f.svg");
    std::string what;
    for (const std::string& a : args) what += a + " ";
    EXPECT_GE(root->with_class("point").size(), 5u) << what;
    expect_clean(*root, what);
  }
}

}  // namespace
