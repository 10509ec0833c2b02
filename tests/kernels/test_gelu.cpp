#include "kernels/gelu.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "fd_check.h"

using namespace remat::kernels;
using namespace remat::test;

namespace {
double gelu_ref(double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }
double gelu_grad_ref(double x) {
  const double k = std::sqrt(2.0 / M_PI), u = k * (x + 0.044715 * x * x * x), th = std::tanh(u);
  return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * k * (1.0 + 3.0 * 0.044715 * x * x);
}
}  // namespace

TEST(Gelu, MatchesDoubleFormula) {
  std::vector<float> x;
  for (int i = -4000; i <= 4000; ++i) x.push_back(float(i) * 0.0025f);  // [-10, 10]
  for (float v : {-1e4f, -100.0f, -30.0f, 30.0f, 100.0f, 1e4f, 0.0f, 1e-20f}) x.push_back(v);
  const int64_t N = int64_t(x.size());
  std::vector<float> out(N), dx(N, 0.0f), ones(N, 1.0f);
  gelu_forward<float>(out, x, N);
  gelu_backward<float>(dx, x, ones, N);
  for (int64_t i = 0; i < N; ++i) {
    ASSERT_NEAR(out[i], gelu_ref(x[i]), 2e-6 * std::fabs(x[i]) + 1e-30) << "x=" << x[i];
    ASSERT_NEAR(dx[i], gelu_grad_ref(x[i]), 1e-5) << "x=" << x[i];
  }
}

TEST(Gelu, GradientFiniteDifference) {
  const int64_t N = 97;
  auto x = randn(N, 1, 2.0f);
  std::vector<float> dx(N);
  fd_check(
      N, [&](std::span<float> out) { gelu_forward<float>(out, x, N); },
      [&](std::span<const float> dout) { gelu_backward<float>(dx, x, dout, N); }, {{"inp", &x, &dx}});
}

TEST(Gelu, BitIdenticalAcrossRunsThreadsAndOffsets) {
  const int64_t N = 10007;
  auto x = randn(N, 2, 3.0f), d = randn(N, 3);
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    std::vector<float> out(N), dx(N, 0.0f);
    gelu_forward<float>(out, x, N);
    gelu_backward<float>(dx, x, d, N);
    omp_set_num_threads(2);
    out.insert(out.end(), dx.begin(), dx.end());
    return out;
  };
  const auto r1 = run(2), r2 = run(2), r3 = run(1);
  EXPECT_TRUE(bit_equal(r1, r2));
  EXPECT_TRUE(bit_equal(r1, r3));
  // A sub-range (different alignment, vector/scalar split) gives the same per-element values.
  std::vector<float> sub(N - 3);
  gelu_forward<float>(sub, std::span<const float>(x).subspan(3), N - 3);
  EXPECT_TRUE(bit_equal(sub, std::span<const float>(r1).subspan(3, N - 3)));
}

TEST(Gelu, BackwardOverwriteIgnoresOldContentsAndEqualsAccumulatingIntoZero) {
  const int64_t N = 1003;
  auto x = randn(N, 4, 3.0f), d = randn(N, 5);
  std::vector<float> acc(N, 0.0f), over(N, std::nanf(""));
  gelu_backward<float>(acc, x, d, N);
  gelu_backward<float>(over, x, d, N, /*overwrite=*/true);
  for (int64_t i = 0; i < N; ++i) ASSERT_EQ(over[i], acc[i]) << i;  // == : 0 + g and g differ only in the sign of 0
}
