// Model state per rank: ZeRO's published accounting (Rajbhandari et al. 2020, Figure 1) and remat's
// own dry run of its trainer's parameters, gradients and AdamW moments under --zero 0, 1 and 3.
#include <gtest/gtest.h>

#include "planner/planner.h"
#include "planner/zero.h"

using namespace remat;

TEST(ZeroAccounting, ReproducesFigureOneOfThePaper) {
  // 7.5B parameters on 64 devices, K = 12: 120 GB, 31.4 GB, 16.6 GB and 1.9 GB per device.
  const double psi = 7.5e9;
  EXPECT_NEAR(planner::zero_paper_bytes(psi, 64, 0) / 1e9, 120.0, 0.05);
  EXPECT_NEAR(planner::zero_paper_bytes(psi, 64, 1) / 1e9, 31.4, 0.05);
  EXPECT_NEAR(planner::zero_paper_bytes(psi, 64, 2) / 1e9, 16.6, 0.05);
  EXPECT_NEAR(planner::zero_paper_bytes(psi, 64, 3) / 1e9, 1.9, 0.05);
}

TEST(ZeroAccounting, RematShardsAdamWsMomentsOneNth) {
  ModelConfig c = preset("tiny");
  const int64_t psi = planner::shape_only_model(c)->num_params();
  const auto whole = planner::remat_model_state(c, 4, 0);
  ASSERT_TRUE(whole);
  // fp32: a master parameter, a gradient and two moments, 4 bytes each.
  EXPECT_EQ(whole->parameters, size_t(4 * psi));
  EXPECT_EQ(whole->gradients, size_t(4 * psi));
  EXPECT_EQ(whole->optimizer, size_t(8 * psi));
  const auto sharded = planner::remat_model_state(c, 4, 1);
  ASSERT_TRUE(sharded);
  EXPECT_EQ(sharded->parameters, whole->parameters);
  EXPECT_EQ(sharded->gradients, whole->gradients);
  // The largest rank's chunks: a quarter, plus at most one element per tensor for the rounding.
  EXPECT_GE(sharded->optimizer, whole->optimizer / 4);
  EXPECT_LE(sharded->optimizer, whole->optimizer / 4 + 8 * 64);
  EXPECT_FALSE(planner::remat_model_state(c, 4, 2));
  // Stage 3, between steps: a quarter of every parameter, gradient and moment (the largest chunks).
  const auto all = planner::remat_model_state(c, 4, 3);
  ASSERT_TRUE(all);
  for (const auto& [part, of] : {std::pair{all->parameters, whole->parameters}, {all->gradients, whole->gradients},
                                 {all->optimizer, whole->optimizer}}) {
    EXPECT_GE(part, of / 4);
    EXPECT_LE(part, of / 4 + 8 * 64);
  }
  // bf16: a bf16 copy of each matrix beside its fp32 master.
  c.precision = DType::BF16;
  const auto bf16 = planner::remat_model_state(c, 4, 0);
  ASSERT_TRUE(bf16);
  EXPECT_GT(bf16->parameters, whole->parameters);
  EXPECT_LT(bf16->parameters, whole->parameters + size_t(2 * psi));
  // ... and a quarter of both under stage 3.
  const auto bf16_all = planner::remat_model_state(c, 4, 3);
  ASSERT_TRUE(bf16_all);
  EXPECT_GE(bf16_all->parameters, bf16->parameters / 4);
  EXPECT_LE(bf16_all->parameters, bf16->parameters / 4 + 8 * 64);
}

// The gathers a schedule implies, for L = 9 (schedules as make_schedule writes them):
//   block: f0c..f7c f8i b8 r7i b7 x7 ... r0i b0 x0      sqrt: f0c f1n f2n f3c f4n f5n f6i f7i f8i b8 b7 b6
//   r3n r4c r5i b5 r4i b4 x4 r3i b3 x3 r0n r1c r2i b2 r1i b1 x1 r0i b0 x0
TEST(ZeroGathers, FollowTheSchedule) {
  auto count = [](const char* strategy, bool hold) {
    return planner::zero3_gathers(make_schedule(parse_strategy(strategy, 9, false), 9), hold);
  };
  // Every block once in the forward; in the backward, a replay right before its backward shares one
  // gather, and so do the last forward and its backward.
  for (const char* s : {"none", "block"}) {
    const planner::GatherCount g = count(s, false);
    EXPECT_EQ(g.forward, 9) << s;
    EXPECT_EQ(g.backward, 8) << s;
  }
  // sqrt re-gathers a segment's blocks between their replay and their backward, or holds them.
  const planner::GatherCount again = count("sqrt", false), held = count("sqrt", true);
  EXPECT_EQ(again.forward, 9);
  EXPECT_EQ(again.backward, 12);
  EXPECT_EQ(held.backward, 8);
  EXPECT_EQ(held.held_peak, 3);
  EXPECT_EQ(again.held_peak, 1);
}
