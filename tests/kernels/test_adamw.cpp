#include "kernels/adamw.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "fd_check.h"

using namespace remat::kernels;
using namespace remat::test;

TEST(AdamW, MatchesScalarDoubleReference) {
  const int64_t N = 1037;
  const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
  auto p = randn(N, 1);
  std::vector<float> m(N, 0.0f), v(N, 0.0f);
  std::vector<double> rp(p.begin(), p.end()), rm(N, 0.0), rv(N, 0.0);
  for (int64_t t = 1; t <= 5; ++t) {
    auto g = randn(N, 100 + t);
    adamw_update(p, g, m, v, N, lr, b1, b2, eps, wd, t);
    for (int64_t i = 0; i < N; ++i) {
      rp[i] -= double(lr) * wd * rp[i];
      rm[i] = b1 * rm[i] + (1.0 - b1) * g[i];
      rv[i] = b2 * rv[i] + (1.0 - b2) * double(g[i]) * g[i];
      const double mh = rm[i] / (1.0 - std::pow(double(b1), double(t)));
      const double vh = rv[i] / (1.0 - std::pow(double(b2), double(t)));
      rp[i] -= lr * mh / (std::sqrt(vh) + eps);
    }
  }
  for (int64_t i = 0; i < N; ++i) {
    ASSERT_NEAR(p[i], rp[i], 1e-5 * (1.0 + std::fabs(rp[i]))) << i;
    ASSERT_NEAR(m[i], rm[i], 1e-5 * (1.0 + std::fabs(rm[i]))) << i;
    ASSERT_NEAR(v[i], rv[i], 1e-5 * (1.0 + std::fabs(rv[i]))) << i;
  }
  // The first step of Adam moves every parameter by about lr (|m_hat / sqrt(v_hat)| = 1).
  auto q = randn(4, 7);
  auto q0 = q;
  std::vector<float> g = {1.0f, -2.0f, 1e-3f, -5.0f}, m1(4, 0.0f), v1(4, 0.0f);
  adamw_update(q, g, m1, v1, 4, 0.5f, 0.9f, 0.999f, 1e-8f, 0.0f, 1);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(q[i], q0[i] - 0.5f * (g[i] > 0 ? 1.0f : -1.0f), 1e-4) << i;
}

TEST(AdamW, SumSquaresAndScale) {
  for (int64_t n : {0, 1, 63, 64, 100001}) {
    auto g = randn(n, 8, 3.0f);
    double ref = 0.0;
    for (float x : g) ref += double(x) * x;
    EXPECT_NEAR(sum_squares(g), ref, 1e-12 * (1.0 + ref)) << n;
    EXPECT_EQ(grad_norm_sq(g), sum_squares(g));
    auto h = g;
    scale_inplace(h, 0.5f);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(h[i], g[i] * 0.5f);
  }
}

TEST(AdamW, DeterministicAcrossThreadCounts) {
  const int64_t N = 300007;
  auto g = randn(N, 9);
  omp_set_num_threads(1);
  const double s1 = sum_squares(g);
  omp_set_num_threads(2);
  const double s2 = sum_squares(g), s3 = sum_squares(g);
  EXPECT_EQ(s1, s2);
  EXPECT_EQ(s2, s3);
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    auto p = randn(N, 10);
    std::vector<float> m(N, 0.1f), v(N, 0.2f);
    adamw_update(p, g, m, v, N, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 3);
    omp_set_num_threads(2);
    p.insert(p.end(), m.begin(), m.end());
    p.insert(p.end(), v.begin(), v.end());
    return p;
  };
  EXPECT_TRUE(bit_equal(run(2), run(1)));
}
