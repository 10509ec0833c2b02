// The schedule spelling a plan file carries (encode_schedule / decode_schedule, --recompute actions:...)
// and the check that a schedule is one the executor can run over L blocks (validate_schedule): every
// named strategy and every plan of the optimal frontier round-trips and validates; malformed text and
// schedules made for another chain are refused, each with its own one-line message. Also the
// segment list whose sum overflows an int.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "planner/optimal.h"

using namespace remat;

namespace {

bool same(const Schedule& a, const Schedule& b) {
  if (a.size() != b.size()) return false;
  for (size_t k = 0; k < a.size(); ++k)
    if (a[k].kind != b[k].kind || a[k].block != b[k].block || a[k].keep != b[k].keep || a[k].recompute != b[k].recompute)
      return false;
  return true;
}

std::string refusal(const std::string& text, int L) {
  try {
    validate_schedule(decode_schedule(text), L);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(PlanFile, EveryNamedStrategyRoundTripsAndValidates) {
  for (int L = 1; L <= 9; ++L) {
    std::vector<std::string> names{"none", "all", "block", "sqrt"};
    for (int K = 1; K <= L; ++K) names.push_back("uniform:" + std::to_string(K));
    for (const std::string& n : names)
      for (bool last : {false, true})
        for (bool internals : {false, true}) {
          SCOPED_TRACE(n + " L=" + std::to_string(L));
          const Schedule s = make_schedule(parse_strategy(n, L, last, internals), L);
          const std::string text = encode_schedule(s);
          EXPECT_TRUE(same(decode_schedule(text), s)) << text;
          EXPECT_NO_THROW(validate_schedule(s, L)) << text;
          // As a --recompute value: the same schedule, labelled by its counts.
          const StrategySpec spec = parse_strategy("actions:" + text, L, false);
          EXPECT_TRUE(same(make_schedule(spec, L), s));
          EXPECT_EQ(spec.base_label(), "actions:" + text);
          EXPECT_EQ(spec.label().rfind("plan (", 0), 0u) << spec.label();
        }
  }
}

TEST(PlanFile, EveryFrontierPlanRoundTripsAndValidates) {
  for (Arch arch : {Arch::GPT2, Arch::Llama}) {
    ModelConfig c;
    c.arch = arch;
    c.L = 7; c.C = 16; c.NH = 2; c.T = 8; c.V = 32;
    const auto m = planner::shape_only_model(c);
    const NamePolicy sel = m->policy("selective");
    planner::PlanProblem pp{{planner::trace_step(*m, 2, 8), planner::trace_step(*m, 2, 8, &sel)}, {"none", "selective"}, {}, 0};
    const auto f = planner::optimal_frontier(pp);
    ASSERT_GE(f.size(), 3u);
    for (const planner::ChainPlan& p : f) {
      const std::string text = encode_schedule(p.schedule);
      EXPECT_TRUE(same(decode_schedule(text), p.schedule)) << text;
      EXPECT_NO_THROW(validate_schedule(p.schedule, 7)) << text;
    }
  }
}

TEST(PlanFile, MalformedActionsAreRefusedNamingTheToken) {
  for (const auto& [text, needle] : std::vector<std::pair<std::string, std::string>>{
           {"", "action 1 '' is not an action"},
           {"f0i,,b0", "action 2 '' is not an action"},
           {"q0i", "starts with 'q'"},
           {"f0z", "ends in 'z'"},
           {"fxi", "has no block number"},
           {"b", "is not an action"},
           {"f99999999i", "has no block number"}}) {
    SCOPED_TRACE(text);
    try {
      decode_schedule(text);
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("[recompute]"), std::string::npos) << e.what();
    }
  }
}

TEST(PlanFile, SchedulesInvalidForTheChainAreRefused) {
  const std::string block4 = encode_schedule(make_schedule(parse_strategy("block", 4, false), 4));
  EXPECT_EQ(refusal(block4, 4), "");
  EXPECT_NE(refusal(block4, 3).find("block 3 is not in 0..2"), std::string::npos) << refusal(block4, 3);
  EXPECT_NE(refusal(block4, 5).find("forward phase stops at block 4 of 5"), std::string::npos) << refusal(block4, 5);
  for (const auto& [text, needle] : std::vector<std::pair<std::string, std::string>>{
           {"f0i,f1i,b1", "ends before block 0's backward"},
           {"f0i,f1i,b0,b1", "next backward must be block 1"},
           {"f0c,f1i,b1,b0", "block 0's internals are not recorded"},
           {"f0c,f1i,b1,r0i,b0", "checkpoint x0 still held"},
           {"f0c,f1i,b1,r0i,b0,x0,x0", "x0 is not a checkpoint"},
           {"f0n,f1i,b1,r0i,b0", "input x0 is neither current nor a checkpoint"},
           {"f1i,f0i,b1,b0", "must run block 0 next"},
           {"f0i,f1i,b1,f0i,b0", "first forward after the forward phase"},
           {"f0c,f1i,b1,r0c,b0", "already a checkpoint"},
           {"f0i,f1i,b1,r1i,b0", "neither current nor a checkpoint"}}) {
    SCOPED_TRACE(text);
    const std::string why = refusal(text, 2);
    EXPECT_NE(why.find(needle), std::string::npos) << why;
    EXPECT_NE(why.find("(hint: "), std::string::npos) << why;
  }
}

// 3000 lengths of 10^6 sum to 3e9, past INT_MAX: refused as a wrong sum, not wrapped into a right one.
TEST(PlanFile, SegmentListWhoseSumOverflowsAnIntIsRefused) {
  std::string text = "segments:";
  for (int k = 0; k < 3000; ++k) text += (k ? ",1000000" : "1000000");
  try {
    parse_strategy(text, 12, false);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sum to more than the 12 layers"), std::string::npos) << e.what();
  }
  // 2^32 + 12 would wrap to 12 in 32 bits.
  std::string wrap = "segments:";
  for (int k = 0; k < 4294; ++k) wrap += "1000000,";
  wrap += "967296,12";
  EXPECT_THROW(parse_strategy(wrap, 12, false), Error);
}

}  // namespace
