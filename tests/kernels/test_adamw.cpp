#include "kernels/adamw.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include "fd_check.h"

using namespace remat::kernels;
using namespace remat::test;

namespace {

struct Hyper {
  float lr, b1, b2, eps, wd;
};

// What the reference gets wrong on purpose, to show the comparison can fail (non-vacuity).
enum class Variant { Exact, NoBiasCorrection, NoWeightDecay, CoupledWeightDecay, DecayAfterUpdate, EpsInsideSqrt };

// AdamW (Loshchilov & Hutter; torch.optim.AdamW) in double, from the float inputs and hyperparameters:
//   p <- p - lr*wd*p                            (decoupled weight decay, on the pre-update p)
//   m <- b1 m + (1-b1) g;  v <- b2 v + (1-b2) g^2
//   p <- p - lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
struct RefAdamW {
  std::vector<double> p, m, v;
  std::vector<double> m_abs = std::vector<double>(p.size(), 0.0);  // m over |g|: the scale of m's rounding error
  void step(const std::vector<float>& gf, const Hyper& h, int64_t t, Variant var = Variant::Exact) {
    const double lr = h.lr, b1 = h.b1, b2 = h.b2, eps = h.eps, wd = h.wd;
    const bool bias = var != Variant::NoBiasCorrection;
    const double bc1 = bias ? 1.0 - std::pow(b1, double(t)) : 1.0;
    const double bc2 = bias ? 1.0 - std::pow(b2, double(t)) : 1.0;
    for (size_t i = 0; i < p.size(); ++i) {
      double g = gf[i];
      if (var == Variant::CoupledWeightDecay) g += wd * p[i];  // Adam with L2, not AdamW
      if (var == Variant::Exact || var == Variant::NoBiasCorrection || var == Variant::EpsInsideSqrt)
        p[i] -= lr * wd * p[i];
      m[i] = b1 * m[i] + (1.0 - b1) * g;
      m_abs[i] = b1 * m_abs[i] + (1.0 - b1) * std::fabs(g);
      v[i] = b2 * v[i] + (1.0 - b2) * g * g;
      const double denom = var == Variant::EpsInsideSqrt ? std::sqrt(v[i] / bc2 + eps) : std::sqrt(v[i] / bc2) + eps;
      p[i] -= lr * (m[i] / bc1) / denom;
      if (var == Variant::DecayAfterUpdate) p[i] -= lr * wd * p[i];
    }
  }
};

// Gradients over many magnitudes: some far below eps (where eps dominates the denominator), some large.
std::vector<float> mixed_grads(int64_t n, uint64_t seed) {
  auto g = randn(n, seed);
  const float scales[] = {1e-10f, 1e-6f, 1e-3f, 1.0f, 30.0f};
  for (int64_t i = 0; i < n; ++i) g[i] *= scales[i % 5];
  return g;
}

// Largest |got - ref| / scale: the error relative to the magnitude of the terms summed (m can cancel).
double max_rel_err(std::span<const float> got, const std::vector<double>& ref, const std::vector<double>& scale) {
  double e = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) e = std::max(e, std::fabs(double(got[i]) - ref[i]) / (scale[i] + 1e-300));
  return e;
}

// Largest |got - ref| scaled by (1 + |ref|): parameters are O(1).
double max_param_err(std::span<const float> got, const std::vector<double>& ref) {
  double e = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) e = std::max(e, std::fabs(double(got[i]) - ref[i]) / (1.0 + std::fabs(ref[i])));
  return e;
}

}  // namespace

TEST(AdamW, MatchesDoubleReferenceOverSteps) {
  const int64_t N = 1037;  // not a multiple of 16: a partial vector block at the end
  const Hyper hypers[] = {
      {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f},    // GPT-style
      {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f},  // torch defaults
      {0.1f, 0.8f, 0.99f, 1e-6f, 0.5f},     // large lr * wd: decay order and coupling matter a lot
  };
  const double kParamTol = 2e-6, kMomentTol = 2e-6;  // float vs double, 10 steps; measured < 3e-7
  for (const Hyper& h : hypers) {
    SCOPED_TRACE(testing::Message() << "lr=" << h.lr << " b2=" << h.b2 << " wd=" << h.wd);
    auto p = randn(N, 1);
    std::vector<float> m(N, 0.0f), v(N, 0.0f);
    RefAdamW ref{std::vector<double>(p.begin(), p.end()), std::vector<double>(N, 0.0), std::vector<double>(N, 0.0)};
    for (int64_t t = 1; t <= 10; ++t) {
      const auto g = mixed_grads(N, 100 + t);
      adamw_update(p, g, m, v, N, h.lr, h.b1, h.b2, h.eps, h.wd, t);
      ref.step(g, h, t);
      ASSERT_LT(max_param_err(p, ref.p), kParamTol) << "params, step " << t;
      ASSERT_LT(max_rel_err(m, ref.m, ref.m_abs), kMomentTol) << "m, step " << t;
      ASSERT_LT(max_rel_err(v, ref.v, ref.v), kMomentTol) << "v, step " << t;
    }
  }
}

TEST(AdamW, ReferenceComparisonCatchesWrongFormulas) {
  // Each wrong formula, run beside the kernel from the same state, leaves the tolerance above far
  // behind within a few steps: the comparison would fail if the kernel made any of these mistakes.
  const int64_t N = 1037;
  const Hyper h{0.1f, 0.8f, 0.99f, 1e-6f, 0.5f};
  for (Variant var : {Variant::NoBiasCorrection, Variant::NoWeightDecay, Variant::CoupledWeightDecay,
                      Variant::DecayAfterUpdate, Variant::EpsInsideSqrt}) {
    auto p = randn(N, 1);
    std::vector<float> m(N, 0.0f), v(N, 0.0f);
    RefAdamW ref{std::vector<double>(p.begin(), p.end()), std::vector<double>(N, 0.0), std::vector<double>(N, 0.0)};
    double worst = 0.0;
    for (int64_t t = 1; t <= 3; ++t) {
      const auto g = mixed_grads(N, 100 + t);
      adamw_update(p, g, m, v, N, h.lr, h.b1, h.b2, h.eps, h.wd, t);
      ref.step(g, h, t, var);
      worst = std::max(worst, max_param_err(p, ref.p));
    }
    EXPECT_GT(worst, 1e-4) << "variant " << int(var) << " is indistinguishable from the kernel";
  }
}

TEST(AdamW, FirstStepMovesByLr) {
  // |m_hat / sqrt(v_hat)| = 1 at t = 1 (with bias correction), so each parameter moves by lr * sign(g).
  std::vector<float> q = {0.25f, -1.0f, 2.0f, 0.0f}, q0 = q;
  std::vector<float> g = {1.0f, -2.0f, 1e-3f, -5.0f}, m1(4, 0.0f), v1(4, 0.0f);
  adamw_update(q, g, m1, v1, 4, 0.5f, 0.9f, 0.999f, 1e-8f, 0.0f, 1);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(q[i], q0[i] - 0.5f * (g[i] > 0 ? 1.0f : -1.0f), 1e-4) << i;
}

TEST(AdamW, SumSquaresAgainstDoubleReference) {
  // Exact cases: every product and partial sum is representable, so the result is exact.
  EXPECT_EQ(grad_norm_sq(std::vector<float>{3.0f, 4.0f}), 25.0);
  EXPECT_EQ(grad_norm_sq(std::vector<float>(100001, 1.0f)), 100001.0);
  EXPECT_EQ(grad_norm_sq(std::vector<float>{}), 0.0);
  EXPECT_EQ(grad_norm_sq(std::vector<float>{-0.5f}), 0.25);
  // Random data over many magnitudes against a long-double sum in index order.
  for (int64_t n : {1, 7, 63, 64, 65, 100001}) {
    auto g = randn(n, 8, 3.0f);
    for (int64_t i = 0; i < n; i += 3) g[i] *= 1e-4f;
    long double ref = 0.0L;
    for (float x : g) ref += (long double)x * (long double)x;
    const double got = grad_norm_sq(g);
    EXPECT_NEAR(got, double(ref), 1e-13 * double(ref)) << n;
    EXPECT_EQ(sum_squares(g), got) << n;  // the clipping helper is the same reduction
    // Not vacuous: dropping one element's square is visible at this tolerance.
    EXPECT_GT(std::fabs(double(ref - (long double)g[n / 2] * g[n / 2]) - got), 1e-13 * double(ref)) << n;
  }
  // An element whose square overflows float is summed in double.
  EXPECT_EQ(grad_norm_sq(std::vector<float>{1e20f, 1e20f}), 2.0 * double(1e20f) * double(1e20f));
}

TEST(AdamW, ScaleInplace) {
  for (int64_t n : {0, 1, 63, 64, 100001}) {
    auto g = randn(n, 8, 3.0f);
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
