#include "kernels/crossentropy.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "fd_check.h"

using namespace remat::kernels;
using namespace remat::test;

namespace {
// Naive double reference: lse and loss per row, plus softmax - onehot (times dloss).
void ce_ref(const std::vector<float>& logits, const std::vector<int32_t>& tgt, int64_t N, int64_t V,
            std::vector<double>& lse, std::vector<double>& loss, std::vector<double>& grad,
            const std::vector<float>& dloss) {
  lse.assign(N, 0.0);
  loss.assign(N, 0.0);
  grad.assign(N * V, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    double mx = -1e300, s = 0.0;
    for (int64_t j = 0; j < V; ++j) mx = std::max(mx, double(logits[n * V + j]));
    for (int64_t j = 0; j < V; ++j) s += std::exp(logits[n * V + j] - mx);
    lse[n] = mx + std::log(s);
    if (tgt[n] < 0) continue;
    loss[n] = lse[n] - logits[n * V + tgt[n]];
    for (int64_t j = 0; j < V; ++j)
      grad[n * V + j] = dloss[n] * (std::exp(logits[n * V + j] - lse[n]) - (j == tgt[n] ? 1.0 : 0.0));
  }
}
}  // namespace

TEST(CrossEntropy, MatchesNaiveDoubleWithIgnoreIndex) {
  const int64_t N = 6, V = 1003;
  auto logits = randn(N * V, 1, 3.0f);
  for (int64_t j = 0; j < V; ++j) logits[2 * V + j] += 1000.0f;  // large logits: max subtraction needed
  const std::vector<int32_t> tgt = {0, 1002, 17, -1, 500, -100};
  auto dloss = randn(N, 2);
  std::vector<float> loss(N, 9.0f), lse(N), dlogits(N * V, 0.0f);
  crossentropy_forward<float>(loss, lse, logits, tgt.data(), N, V);
  crossentropy_backward<float>(dlogits, dloss, logits, lse, tgt.data(), N, V);
  std::vector<double> rlse, rloss, rgrad;
  ce_ref(logits, tgt, N, V, rlse, rloss, rgrad, dloss);
  for (int64_t n = 0; n < N; ++n) {
    EXPECT_NEAR(lse[n], rlse[n], 2e-6 * std::fabs(rlse[n]) + 1e-5) << n;
    EXPECT_NEAR(loss[n], rloss[n], 1e-4) << n;
    for (int64_t j = 0; j < V; ++j) ASSERT_NEAR(dlogits[n * V + j], rgrad[n * V + j], 1e-6) << n << "," << j;
  }
  EXPECT_EQ(loss[3], 0.0f);
  EXPECT_EQ(loss[5], 0.0f);
  for (int64_t j = 0; j < V; ++j) ASSERT_EQ(dlogits[3 * V + j], 0.0f);  // ignored: no gradient
}

TEST(CrossEntropy, GradientFiniteDifference) {
  const int64_t N = 4, V = 21;
  auto logits = randn(N * V, 3, 2.0f);
  const std::vector<int32_t> tgt = {3, -1, 20, 0};
  std::vector<float> lse(N), dlogits(N * V);
  fd_check(
      N, [&](std::span<float> losses) { crossentropy_forward<float>(losses, lse, logits, tgt.data(), N, V); },
      [&](std::span<const float> dlosses) {
        std::vector<float> losses(N);
        crossentropy_forward<float>(losses, lse, logits, tgt.data(), N, V);
        crossentropy_backward<float>(dlogits, dlosses, logits, lse, tgt.data(), N, V);
      },
      {{"logits", &logits, &dlogits}});
}

TEST(CrossEntropy, DeterministicAcrossThreadCounts) {
  const int64_t N = 64, V = 5000;
  auto logits = randn(N * V, 4, 4.0f), dloss = randn(N, 5);
  std::vector<int32_t> tgt(N);
  for (int64_t n = 0; n < N; ++n) tgt[n] = int32_t((n * 331) % V);
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    std::vector<float> loss(N), lse(N), d(N * V, 0.5f);
    crossentropy_forward<float>(loss, lse, logits, tgt.data(), N, V);
    crossentropy_backward<float>(d, dloss, logits, lse, tgt.data(), N, V);
    omp_set_num_threads(2);
    d.insert(d.end(), loss.begin(), loss.end());
    d.insert(d.end(), lse.begin(), lse.end());
    return d;
  };
  const auto r1 = run(2), r2 = run(2), r3 = run(1);
  EXPECT_TRUE(bit_equal(r1, r2));
  EXPECT_TRUE(bit_equal(r1, r3));
}

// The overwrite mode (a fresh gradient, or in place over the logits) gives the bits of accumulating
// into a zero-filled buffer -- signed zeros of underflowed products included -- and sets ignored rows
// to 0 without reading the buffer's old contents.
TEST(CrossEntropy, OverwriteAndInPlaceEqualAccumulatingIntoZeros) {
  for (int64_t V : {1, 15, 16, 17, 1003, 4096}) {
    const int64_t N = 37;
    auto logits = randn(N * V, 6, 30.0f);  // wide logits: many exp(x - lse) underflow to 0
    std::vector<int32_t> tgt(N);
    for (int64_t n = 0; n < N; ++n) tgt[n] = n % 5 == 2 ? -1 : int32_t((n * 131) % V);
    auto dloss = randn(N, 7);
    dloss[3] = -1e-38f;  // products that underflow: -0 vs +0 matters
    std::vector<float> loss(N), lse(N);
    crossentropy_forward<float>(loss, lse, logits, tgt.data(), N, V);
    std::vector<float> ref(N * V, 0.0f), fresh(N * V, std::nanf("")), inplace = logits;
    crossentropy_backward<float>(ref, dloss, logits, lse, tgt.data(), N, V);
    crossentropy_backward<float>(fresh, dloss, logits, lse, tgt.data(), N, V, /*overwrite=*/true);
    crossentropy_backward<float>(inplace, dloss, inplace, lse, tgt.data(), N, V, /*overwrite=*/true);
    EXPECT_TRUE(bit_equal(fresh, ref)) << "V=" << V;
    EXPECT_TRUE(bit_equal(inplace, ref)) << "V=" << V;
  }
}
