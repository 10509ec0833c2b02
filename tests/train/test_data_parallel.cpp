// Data parallelism in one process (--ranks N without mpirun): each rank's micro-batches accumulate
// into a gradient of their own, summed in rank order, exactly as N processes under mpirun sum them
// (tests/cli/test_mpi.cpp compares the two byte for byte). Here: the whole step's prediction equals
// its measurement, the batches are the ones one process would run, and bad settings are refused.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "dist/data_parallel.h"
#include "planner/planner.h"
#include "options.h"
#include "train/trainer.h"

using namespace remat;

namespace {
TrainOptions run(int64_t ranks, int64_t zero = 0) {
  TrainOptions o = test_options::quiet();
  o.model = preset("tiny");
  o.model.dropout = 0.1f;
  o.steps = 3;
  o.batch = 4;
  o.micro_batch = 1;
  o.recompute = "block";
  o.ranks = ranks;
  o.zero = zero;
  return o;
}
std::vector<float> weights(Trainer& t) {
  std::vector<float> w;
  for (const Param& p : t.model().params()) w.insert(w.end(), p.value.data(), p.value.data() + p.value.numel());
  return w;
}
}  // namespace

TEST(DataParallel, EmulatedRanksArePredictedToTheByte) {
  for (int64_t ranks : {2, 4}) {
    Trainer t(run(ranks));
    StepMeasure m;
    t.step(0, &m);
    EXPECT_EQ(t.predicted_memory().peak_total, m.peak_total) << ranks << " ranks";
    EXPECT_EQ(t.accum(), 4);
    ASSERT_TRUE(t.last_reduce_wait_s());
  }
}

TEST(DataParallel, SameBatchesAndLossAsOneProcessNearlyTheSameWeights) {
  Trainer one(run(1)), two(run(2));
  EXPECT_FALSE(one.last_reduce_wait_s());
  for (int64_t s = 0; s < 3; ++s) {
    const float a = one.step(s, nullptr), b = two.step(s, nullptr);
    if (s == 0) EXPECT_EQ(a, b);  // the same micro-batches and dropout streams: the first loss is bit-equal
    EXPECT_NEAR(a, b, 1e-4 * std::fabs(a));
  }
  // The gradient is summed in another order (per rank, then over ranks): close, and not a no-op.
  const std::vector<float> w1 = weights(one), w2 = weights(two);
  ASSERT_EQ(w1.size(), w2.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < w1.size(); ++i) diff += double(w1[i] - w2[i]) * double(w1[i] - w2[i]), norm += double(w1[i]) * w1[i];
  EXPECT_LT(std::sqrt(diff / norm), 1e-5);
  Trainer fresh(run(2));
  const std::vector<float> w0 = weights(fresh);
  double moved = 0;
  for (size_t i = 0; i < w0.size(); ++i) moved += std::fabs(double(w0[i]) - w2[i]);
  EXPECT_GT(moved, 0.0);
}

TEST(DataParallel, ZeroOneAndThreeInOneProcessAreZeroZero) {
  Trainer a(run(2, 0)), b(run(2, 1)), c(run(2, 3));
  for (int64_t s = 0; s < 2; ++s) {
    const float l = a.step(s, nullptr);
    EXPECT_EQ(l, b.step(s, nullptr));
    EXPECT_EQ(l, c.step(s, nullptr));
  }
  EXPECT_EQ(weights(a), weights(b));
  EXPECT_EQ(weights(a), weights(c));
}

TEST(DataParallel, BadSettingsAreRefusedByName) {
  auto message = [](TrainOptions o) {
    try {
      Trainer t(o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  TrainOptions o = run(3);  // 4 sequences over 3 ranks of 1
  EXPECT_NE(message(o).find("--batch 4 does not divide over 3 ranks of --micro-batch 1"), std::string::npos);
  o = run(2, 2);
  EXPECT_NE(message(o).find("--zero 2 is not supported"), std::string::npos);
  o = run(2, 4);
  EXPECT_NE(message(o).find("--zero must be 0, 1 or 3, got 4"), std::string::npos);
  o = run(0);
  EXPECT_NE(message(o).find("--ranks must be between 1 and 4096"), std::string::npos);
}

// ZeRO-3's step on one rank of 2, by the dry run the planner prices it with: between steps the rank
// holds a chunk of every parameter, gradient and moment; while the step runs, the embedding and the
// head whole, and at most two blocks' parameters (the one running and the next, gathered ahead) and
// two blocks' gradients (the one in its backward and the one whose reduction ends after it).
TEST(DataParallel, ZeroThreeHoldsItsChunksAndTwoBlocksInFlight) {
  ModelConfig c = preset("tiny");
  c.L = 8;
  const auto model = planner::shape_only_model(c);
  size_t chunks = 0, rest = 0, block = 0;
  for (const Param& p : model->params()) {
    const int64_t n = p.value.numel();
    chunks += size_t(n - n / 2) * 4;  // the last rank's chunk, the larger
    const auto split = model->split_name(p.name);
    if (!split) rest += size_t(n) * 4;
    else if (split->first == 0) block += size_t(n) * 4;
  }
  for (const char* strategy : {"none", "block"}) {
    SCOPED_TRACE(strategy);
    StepOptions so;
    so.schedule = make_schedule(parse_strategy(strategy, 8, false), 8);
    const RankShare r = dist::rank_share_to_plan(2, 3, 1, true);
    so.make_extension = r.make_extension;
    so.optimizer_shard = r.optimizer_shard;
    const StepMemory m = dry_run_step(c, 2, c.T, 1, so, 0);
    EXPECT_EQ(m.peak[size_t(Category::Parameter)], chunks + rest + 2 * block);
    EXPECT_EQ(m.peak[size_t(Category::Gradient)], chunks + rest + 2 * block);
    EXPECT_EQ(m.peak[size_t(Category::OptimizerState)], 2 * chunks);
  }
}
