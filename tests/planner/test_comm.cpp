// The communication of a data-parallel step (planner/comm.h): the collectives and bytes each ZeRO
// stage moves, counted by hand on a small model, the latency-bandwidth time, and the link's units.
#include <gtest/gtest.h>

#include "core/error.h"
#include "planner/comm.h"
#include "planner/planner.h"

using namespace remat;

namespace {
// Parameters: how many tensors and fp32 bytes in all, in block 0, and outside the blocks.
struct Counts {
  int64_t tensors = 0, block_tensors = 0, rest_tensors = 0;
  double bytes = 0, block_bytes = 0, rest_bytes = 0;
};
Counts count(const ModelConfig& c) {
  Counts k;
  const auto m = planner::shape_only_model(c);
  for (const Param& p : m->params()) {
    const double b = 4.0 * double(p.value.numel());
    const auto split = m->split_name(p.name);
    ++k.tensors;
    k.bytes += b;
    if (split && split->first == 0) ++k.block_tensors, k.block_bytes += b;
    if (!split) ++k.rest_tensors, k.rest_bytes += b;
  }
  return k;
}
}  // namespace

TEST(CommModel, StagesZeroAndOneReduceScatterThenAllGatherEveryParameter) {
  ModelConfig c = preset("tiny");
  c.L = 3;
  const Counts k = count(c);
  const Schedule s = make_schedule(parse_strategy("block", 3, false), 3);
  for (int zero : {0, 1, 2}) {
    const planner::CommStep st = planner::comm_per_step(c, zero, s, 4);  // micro-batches change nothing
    EXPECT_EQ(st.collectives, 2 * k.tensors) << zero;
    EXPECT_DOUBLE_EQ(st.tensor_bytes, 2 * k.bytes) << zero;
  }
}

TEST(CommModel, StageThreeGathersAsTheScheduleSays) {
  ModelConfig c = preset("tiny");
  c.L = 3;
  const Counts k = count(c);
  // block on 3 blocks: 3 forwards; in the backward, block 2's parameters are still there from its
  // forward before the head, blocks 1 and 0 are gathered once for their replay and backward: 2.
  const Schedule s = make_schedule(parse_strategy("block", 3, false), 3);
  // The embedding and the head are gathered once a step, held through both micro-batches.
  const planner::CommStep st = planner::comm_per_step(c, 3, s, 2);
  EXPECT_EQ(st.collectives, k.tensors + 2 * (3 + 2) * k.block_tensors + k.rest_tensors);
  EXPECT_DOUBLE_EQ(st.tensor_bytes, k.bytes + 2 * (3 + 2) * k.block_bytes + k.rest_bytes);
}

TEST(CommModel, LatencyBandwidthTime) {
  planner::CommStep st;
  st.collectives = 10;
  st.tensor_bytes = 8e9;
  const planner::Link link{1e9, 1e-5};
  EXPECT_EQ(st.seconds(1, link), 0.0);  // one rank sends nothing
  EXPECT_DOUBLE_EQ(st.received_bytes(4), 6e9);
  EXPECT_DOUBLE_EQ(st.seconds(4, link), 10 * 3 * 1e-5 + 6.0);
}

TEST(CommModel, LinkUnits) {
  EXPECT_DOUBLE_EQ(planner::parse_bandwidth("25Gbit", "--bandwidth"), 25e9 / 8);
  EXPECT_DOUBLE_EQ(planner::parse_bandwidth("10GB", "--bandwidth"), 10e9);
  EXPECT_DOUBLE_EQ(planner::parse_bandwidth("1.5GiB", "--bandwidth"), 1.5 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(planner::parse_latency("5us", "--latency"), 5e-6);
  EXPECT_DOUBLE_EQ(planner::parse_latency("2ms", "--latency"), 2e-3);
  for (const char* bad : {"25", "fast", "-1Gbit", "0GB", "25Gbps"}) {
    try {
      planner::parse_bandwidth(bad, "--bandwidth");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--bandwidth '" + std::string(bad) + "'"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(planner::parse_latency("5", "--latency"), Error);
}
