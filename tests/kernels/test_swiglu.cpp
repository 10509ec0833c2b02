#include "kernels/swiglu.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "fd_check.h"

using namespace remat::kernels;
using namespace remat::test;

namespace {
double silu_ref(double x) { return x / (1.0 + std::exp(-x)); }
double silu_grad_ref(double x) {
  const double s = 1.0 / (1.0 + std::exp(-x));
  return s * (1.0 + x * (1.0 - s));
}
}  // namespace

TEST(SwiGlu, MatchesDoubleFormula) {
  std::vector<float> g;
  for (int i = -4000; i <= 4000; ++i) g.push_back(float(i) * 0.0025f);  // [-10, 10]
  for (float v : {-1e4f, -100.0f, -88.0f, -30.0f, 30.0f, 88.0f, 100.0f, 1e4f, 0.0f, 1e-20f}) g.push_back(v);
  const int64_t n = int64_t(g.size());
  auto u = randn(n, 1, 2.0f);
  std::vector<float> out(n), dg(n, 0.0f), du(n, 0.0f), ones(n, 1.0f);
  swiglu_forward<float>(out, g, u, n);
  swiglu_backward<float>(dg, du, ones, g, u, n);
  for (int64_t i = 0; i < n; ++i) {
    const double silu = silu_ref(g[i]);
    ASSERT_NEAR(out[i], silu * u[i], 2e-6 * std::fabs(g[i] * u[i]) + 1e-30) << "g=" << g[i];
    ASSERT_NEAR(du[i], silu, 2e-6 * std::fabs(g[i]) + 1e-30) << "g=" << g[i];
    ASSERT_NEAR(dg[i], silu_grad_ref(g[i]) * u[i], 1e-5 * (1 + std::fabs(u[i]))) << "g=" << g[i];
  }
}

TEST(SwiGlu, ExtremeInputsStayFinite) {
  const std::vector<float> g = {-100.0f, 100.0f, -1e30f, 1e30f, -87.5f, 87.5f, -1e4f, 1e4f};
  const int64_t n = int64_t(g.size());
  const std::vector<float> u(n, 3.0f), d(n, 1.0f);
  std::vector<float> out(n), dg(n, 0.0f), du(n, 0.0f);
  swiglu_forward<float>(out, g, u, n);
  swiglu_backward<float>(dg, du, d, g, u, n);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_TRUE(std::isfinite(out[i]) && std::isfinite(dg[i]) && std::isfinite(du[i])) << "g=" << g[i];
  }
  // silu(100) = 100, silu'(100) = 1; silu(-100) ~ 0, silu'(-100) ~ 0.
  EXPECT_EQ(out[1], 300.0f);
  EXPECT_EQ(du[1], 100.0f);
  EXPECT_EQ(dg[1], 3.0f);
  EXPECT_NEAR(out[0], 0.0f, 1e-30f);
  EXPECT_NEAR(du[0], 0.0f, 1e-30f);
  EXPECT_NEAR(dg[0], 0.0f, 1e-30f);
}

TEST(SwiGlu, GradientsFiniteDifference) {
  const int64_t n = 97;
  auto g = randn(n, 2, 3.0f), u = randn(n, 3);
  std::vector<float> dg(n), du(n);
  fd_check(
      n, [&](std::span<float> out) { swiglu_forward<float>(out, g, u, n); },
      [&](std::span<const float> dout) { swiglu_backward<float>(dg, du, dout, g, u, n); },
      {{"gate", &g, &dg}, {"up", &u, &du}});
}

TEST(SwiGlu, BitIdenticalAcrossRunsThreadsAndOffsets) {
  const int64_t n = 10007;
  auto g = randn(n, 4, 3.0f), u = randn(n, 5), d = randn(n, 6);
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    std::vector<float> out(n), dg(n, 0.0f), du(n, 0.0f);
    swiglu_forward<float>(out, g, u, n);
    swiglu_backward<float>(dg, du, d, g, u, n);
    omp_set_num_threads(2);
    out.insert(out.end(), dg.begin(), dg.end());
    out.insert(out.end(), du.begin(), du.end());
    return out;
  };
  const auto r1 = run(2), r2 = run(2), r3 = run(1);
  EXPECT_TRUE(bit_equal(r1, r2));
  EXPECT_TRUE(bit_equal(r1, r3));
  // A sub-range (different alignment, vector/scalar split) gives the same per-element values.
  std::vector<float> sub(n - 3);
  swiglu_forward<float>(sub, std::span<const float>(g).subspan(3), std::span<const float>(u).subspan(3), n - 3);
  EXPECT_TRUE(bit_equal(sub, std::span<const float>(r1).subspan(3, n - 3)));
  std::vector<float> sdg(n - 3, 0.0f), sdu(n - 3, 0.0f);
  swiglu_backward<float>(sdg, sdu, std::span<const float>(d).subspan(3), std::span<const float>(g).subspan(3),
                  std::span<const float>(u).subspan(3), n - 3);
  EXPECT_TRUE(bit_equal(sdg, std::span<const float>(r1).subspan(n + 3, n - 3)));
  EXPECT_TRUE(bit_equal(sdu, std::span<const float>(r1).subspan(2 * n + 3, n - 3)));
}

TEST(SwiGlu, ForwardInPlaceOverGate) {
  const int64_t n = 1003;
  auto g = randn(n, 7, 3.0f), u = randn(n, 8);
  std::vector<float> out(n), inplace = g;
  swiglu_forward<float>(out, g, u, n);
  swiglu_forward<float>(inplace, inplace, u, n);
  EXPECT_TRUE(bit_equal(out, inplace));
}
