// Naive attention kernel: against a double-precision reference, finite differences, += semantics,
// determinism, and the vectorised dropout keep bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "attention_ref.h"
#include "kernels/attention.h"
#include "kernels/attention_tile.h"  // dropout_keep_bits
#include "kernels/philox.h"

using namespace remat::kernels;
using namespace remat::test;

namespace {

constexpr uint64_t kSeed = 0x5eed1234abcdull, kOffset = 977;  // odd offset: unaligned philox groups

struct NaiveRun {
  std::vector<float> out, probs, dqkv;
};

NaiveRun run_naive(const AttnDims& d, const std::vector<float>& qkv, const std::vector<float>& dout, float p,
              float dqkv_init = 0.f, int64_t ws_threads = 2) {
  NaiveRun r;
  r.out.assign(d.B * d.T * d.C, -7.f);
  r.probs.assign(d.B * d.NH * d.T * d.T, -7.f);
  r.dqkv.assign(d.B * d.T * 3 * d.C, dqkv_init);
  std::vector<float> ws(attention_workspace_floats(d.B, d.T, d.C, d.NH, ws_threads), std::nanf(""));
  attention_forward(r.out, r.probs, qkv, d.B, d.T, d.C, d.NH, p, kSeed, kOffset, ws);
  attention_backward(r.dqkv, dout, qkv, r.probs, d.B, d.T, d.C, d.NH, p, kSeed, kOffset, ws);
  return r;
}

}  // namespace

TEST(DropoutKeepBits, MatchesScalarDropoutKeep) {
  std::vector<uint64_t> w(8);
  for (float p : {0.f, 0.1f, 0.3f, 0.5f, 0.999f})
    for (uint64_t start : {0ull, 1ull, 2ull, 3ull, 61ull, 1000003ull, (1ull << 32) - 5})
      for (int64_t n : {1, 3, 63, 64, 65, 129, 200, 256}) {
        std::fill(w.begin(), w.end(), ~0ull);
        dropout_keep_bits(w.data(), 42, start, n, p);
        for (int64_t k = 0; k < n; ++k)
          ASSERT_EQ(bool((w[k / 64] >> (k % 64)) & 1), dropout_keep(42, start + k, p))
              << "p=" << p << " start=" << start << " n=" << n << " k=" << k;
        if (n % 64) {
          EXPECT_EQ(w[(n - 1) / 64] >> (n % 64), 0u);
        }
      }
}

class NaiveVsRef : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, int64_t, float>> {};

// Forward out/probs and backward dqkv against the double reference; error = max|a-b| / max|ref|.
TEST_P(NaiveVsRef, ForwardAndBackward) {
  auto [T, HS, NH, p] = GetParam();
  const AttnDims d{2, T, HS * NH, NH};
  auto qkv = random_vec(d.B * d.T * 3 * d.C, 1, -2.f, 2.f);
  auto dout = random_vec(d.B * d.T * d.C, 2);
  NaiveRun r = run_naive(d, qkv, dout, p);
  std::vector<double> out, probs, dqkv;
  ref_forward(d, to_double(qkv), p, kSeed, kOffset, out, &probs);
  ref_backward(d, to_double(qkv), to_double(dout), p, kSeed, kOffset, dqkv);
  EXPECT_LT(max_rel_err(r.out, out), 1e-5);
  EXPECT_LT(max_rel_err(r.probs, probs), 1e-5);
  EXPECT_LT(max_rel_err(r.dqkv, dqkv), 1e-5);
  for (int64_t bh = 0; bh < d.B * d.NH; ++bh)
    for (int64_t i = 0; i < T; ++i) {
      double s = 0;
      for (int64_t j = 0; j < T; ++j) {
        const float v = r.probs[(bh * T + i) * T + j];
        if (j > i) {
          ASSERT_EQ(v, 0.f) << "upper triangle must be written as 0";
        }
        s += v;
      }
      ASSERT_NEAR(s, 1.0, 1e-5);
    }
}

// T crosses the 16-query groups (17, 100) and the 64-query tiles (65, 129, 130, 300) with partial
// last groups and tiles; HS = 4, 20, 24, 80 are not multiples of 16 (masked vector tails).
INSTANTIATE_TEST_SUITE_P(Shapes, NaiveVsRef,
                         ::testing::Values(std::make_tuple(5, 4, 2, 0.f), std::make_tuple(5, 4, 2, 0.3f),
                                           std::make_tuple(1, 16, 3, 0.f), std::make_tuple(17, 20, 2, 0.1f),
                                           std::make_tuple(65, 64, 1, 0.f), std::make_tuple(100, 24, 2, 0.f),
                                           std::make_tuple(129, 64, 1, 0.2f), std::make_tuple(130, 16, 3, 0.1f),
                                           std::make_tuple(300, 80, 1, 0.f), std::make_tuple(300, 64, 2, 0.2f)));

// Finite differences on the double reference forward vs the float analytic backward.
// loss = sum(out * W); the dropout mask is a pure function of (seed, offset) so loss is smooth in qkv.
class NaiveGradCheck : public ::testing::TestWithParam<float> {};

TEST_P(NaiveGradCheck, FiniteDifferences) {
  const float p = GetParam();
  const AttnDims d{2, 5, 8, 2};
  auto qkv = random_vec(d.B * d.T * 3 * d.C, 3);
  auto W = random_vec(d.B * d.T * d.C, 4);
  NaiveRun r = run_naive(d, qkv, W, p);
  auto loss = [&](const std::vector<double>& x) {
    std::vector<double> out;
    ref_forward(d, x, p, kSeed, kOffset, out);
    double s = 0;
    for (size_t i = 0; i < out.size(); ++i) s += out[i] * W[i];
    return s;
  };
  std::vector<double> x = to_double(qkv), fd(x.size());
  const double eps = 1e-6;
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + eps;
    const double lp = loss(x);
    x[i] = x0 - eps;
    const double lm = loss(x);
    x[i] = x0;
    fd[i] = (lp - lm) / (2 * eps);
  }
  EXPECT_LT(max_rel_err(r.dqkv, fd), 1e-5);
  double mx = 0;
  for (double g : fd) mx = std::max(mx, std::abs(g));
  EXPECT_GT(mx, 1e-2);  // the check is not vacuous
}

INSTANTIATE_TEST_SUITE_P(Dropout, NaiveGradCheck, ::testing::Values(0.f, 0.3f));

TEST(NaiveAttention, BackwardAddsIntoDqkv) {
  const AttnDims d{2, 70, 48, 3};
  auto qkv = random_vec(d.B * d.T * 3 * d.C, 5);
  auto dout = random_vec(d.B * d.T * d.C, 6);
  NaiveRun zero = run_naive(d, qkv, dout, 0.1f, 0.f);
  NaiveRun pre = run_naive(d, qkv, dout, 0.1f, 0.75f);
  // The kernel accumulates straight into dqkv (one running sum per element), so the initial value
  // changes the rounding: compare to within a few ulps of the magnitudes involved.
  for (size_t i = 0; i < zero.dqkv.size(); ++i) ASSERT_NEAR(pre.dqkv[i], zero.dqkv[i] + 0.75f, 1e-5);
}

TEST(NaiveAttention, DeterministicAcrossRunsAndThreadCounts) {
  const AttnDims d{2, 200, 120, 3};  // 6 (b, h) pairs, HS = 40 not a multiple of 16
  auto qkv = random_vec(d.B * d.T * 3 * d.C, 7);
  auto dout = random_vec(d.B * d.T * d.C, 8);
  NaiveRun a = run_naive(d, qkv, dout, 0.1f), b = run_naive(d, qkv, dout, 0.1f);
  // One thread's worth of workspace: the kernels drop to one thread; results must not change.
  NaiveRun c = run_naive(d, qkv, dout, 0.1f, 0.f, 1);
  for (const NaiveRun* o : {&b, &c}) {
    EXPECT_EQ(0, std::memcmp(a.out.data(), o->out.data(), a.out.size() * 4));
    EXPECT_EQ(0, std::memcmp(a.probs.data(), o->probs.data(), a.probs.size() * 4));
    EXPECT_EQ(0, std::memcmp(a.dqkv.data(), o->dqkv.data(), a.dqkv.size() * 4));
  }
}

TEST(NaiveAttention, DropoutChangesOutputAndSeedMatters) {
  const AttnDims d{1, 40, 16, 2};
  auto qkv = random_vec(d.B * d.T * 3 * d.C, 9);
  auto dout = random_vec(d.B * d.T * d.C, 10);
  NaiveRun a = run_naive(d, qkv, dout, 0.f), b = run_naive(d, qkv, dout, 0.5f);
  EXPECT_GT(max_rel_err(b.out, a.out), 1e-2);
  EXPECT_EQ(0, std::memcmp(a.probs.data(), b.probs.data(), a.probs.size() * 4)) << "probs are pre-dropout";
}
