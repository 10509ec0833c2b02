// LayerNorm (Ba et al. 2016) and RMSNorm (Zhang and Sennrich 2019), layernorm.h and rmsnorm.h, in
// all three storage forms -- fp32, bf16, and the mixed one of --fp32-residual (fp32 input and dinp,
// bf16 output and dout) -- against independent references written here as plain loops in double
// precision from the textbook formulas: the statistics (mean, biased variance, rstd = 1/sqrt(var + eps);
// RMSNorm's rstd = 1/sqrt(mean(x^2) + eps)), the output, and the backward as the derivative of the
// output with respect to each input (dinp_j = sum_c dout_c d out_c / d x_j, written out, not the
// kernels' mean(g) / mean(g * norm) arrangement), dweight and dbias summed over rows, all added into
// pre-filled gradients. The kernels are one template over the storage types, so a bf16 result is not
// compared with the fp32 kernel's (that would compare the template with itself). A bf16 run's
// reference takes the bf16 inputs widened to fp32; one row per problem is scaled so that its
// variance (mean square) is comparable to eps, which then moves rstd by a large factor.
//
// Tolerances. Statistics (fp32): rstd within 1e-5 relative, mean within 1e-6 of the row's largest
// |x| (a sum's rounding error scales with its terms, not with a mean near zero). fp32 outputs and
// gradients: within 1e-5 of the largest |reference| of their row (dweight, dbias: of the vector).
// bf16 outputs and dinp: one bf16 ulp of the double result rounded to bf16 (the kernel computes in
// fp32 and rounds once; its fp32 error can move a value across one rounding boundary), or, where a
// value cancels to near zero, 1e-5 of the row's largest |reference|. Comparing row by row keeps the
// eps-dominated row's much larger gradients from loosening the others. A wrong term (mean(g), the
// variance term, eps, the biased variance), a zero, negated or non-accumulated gradient or a second
// rounding is far outside.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "bf16_twin.h"
#include "fd_check.h"
#include "kernels/bf16.h"
#include "kernels/layernorm.h"
#include "kernels/rmsnorm.h"

using namespace remat::kernels;
using namespace remat::test;

namespace {

// C = 1100 spans one full 1024-element chunk, a partial one and a 12-lane tail.
constexpr int64_t kN = 24, kC = 1100;
constexpr int64_t kSmallRow = 5;       // the row whose variance (mean square) is comparable to eps
constexpr double kLnEps = 1e-5;        // LayerNorm's eps (layernorm.h)
constexpr float kRmsEps = 1e-6f;       // RMSNorm's eps, passed in


double max_abs(const double* p, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(p[i]));
  return m;
}

// Row by row (rows of `row` elements): an fp32 result within 1e-5 of the row's largest |want|...
void expect_rows(const std::vector<float>& got, const std::vector<double>& want, int64_t row,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t r0 = 0; r0 < got.size(); r0 += size_t(row)) {
    const double tol = 1e-5 * max_abs(want.data() + r0, row);
    for (size_t i = r0; i < r0 + size_t(row); ++i)
      ASSERT_LE(std::fabs(double(got[i]) - want[i]), tol)
          << what << " at " << i << " (row " << i / row << "): " << got[i] << " vs " << want[i];
  }
}
// ... and a bf16 one within one bf16 ulp of the rounded reference, or 1e-5 of the row's largest |want|.
void expect_rows(const std::vector<bf16>& got, const std::vector<double>& want, int64_t row,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t r0 = 0; r0 < got.size(); r0 += size_t(row)) {
    const std::vector<bf16> g(got.begin() + r0, got.begin() + r0 + row);
    const std::vector<float> w(want.begin() + r0, want.begin() + r0 + row);
    expect_within_1ulp(g, w, what + " (row " + std::to_string(r0 / row) + ")", 1e-5);
    if (::testing::Test::HasFatalFailure()) return;
  }
}
void expect_mean(const std::vector<float>& got, const std::vector<double>& want, const std::vector<float>& x) {
  for (int64_t n = 0; n < kN; ++n) {
    double mx = 0;
    for (int64_t c = 0; c < kC; ++c) mx = std::max(mx, double(std::fabs(x[n * kC + c])));
    ASSERT_NEAR(got[n], want[n], 1e-6 * mx) << "mean " << n;
  }
}
void expect_rstd(const std::vector<float>& got, const std::vector<double>& want) {
  for (int64_t n = 0; n < kN; ++n) ASSERT_NEAR(got[n], want[n], 1e-5 * want[n]) << "rstd " << n;
}

// The data's own check: the small row's variance (mean square) 1/rstd^2 - eps is within a factor 3
// of eps, so leaving eps out would move its rstd by a large factor.
void expect_comparable_to_eps(double rstd, double eps) {
  const double var = 1.0 / (rstd * rstd) - eps;
  ASSERT_TRUE(var > eps / 3 && var < eps * 3) << "variance " << var << ", eps " << eps;
}

// The references, in double, on the widened inputs: statistics, output, and the gradients added into
// copies of the pre-filled ones.
struct Ref {
  std::vector<double> mean, rstd, out, dx, dw, db;
};

// LayerNorm: out_c = (x_c - m) s w_c + b_c, m = mean(x), s = 1/sqrt(mean((x - m)^2) + eps). With
// g = w * dout, d out_c / d x_j = w_c (s (delta_cj - 1/C) - (x_c - m) s^3 (x_j - m) / C), so
//   dx_j += s (g_j - mean(g)) - (x_j - m) s^3 / C * sum_c g_c (x_c - m),
//   dw_c += sum_rows (x_c - m) s dout_c,   db_c += sum_rows dout_c.
Ref layernorm_ref(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& b,
                  const std::vector<float>& d, const std::vector<float>& dx0, const std::vector<float>& dw0,
                  const std::vector<float>& db0) {
  Ref r{std::vector<double>(kN), std::vector<double>(kN), std::vector<double>(kN * kC),
        std::vector<double>(dx0.begin(), dx0.end()), std::vector<double>(dw0.begin(), dw0.end()),
        std::vector<double>(db0.begin(), db0.end())};
  for (int64_t n = 0; n < kN; ++n) {
    const float* xr = x.data() + n * kC;
    const float* dr = d.data() + n * kC;
    double m = 0, var = 0;
    for (int64_t c = 0; c < kC; ++c) m += xr[c];
    m /= kC;
    for (int64_t c = 0; c < kC; ++c) var += (xr[c] - m) * (xr[c] - m);
    var /= kC;
    const double s = 1.0 / std::sqrt(var + kLnEps);
    r.mean[n] = m;
    r.rstd[n] = s;
    double sum_g = 0, sum_gx = 0;
    for (int64_t c = 0; c < kC; ++c) {
      r.out[n * kC + c] = (xr[c] - m) * s * w[c] + b[c];
      const double g = double(w[c]) * dr[c];
      sum_g += g;
      sum_gx += g * (xr[c] - m);
    }
    for (int64_t j = 0; j < kC; ++j)
      r.dx[n * kC + j] += s * (double(w[j]) * dr[j] - sum_g / kC) - (xr[j] - m) * s * s * s / kC * sum_gx;
    for (int64_t c = 0; c < kC; ++c) {
      r.dw[c] += (xr[c] - m) * s * dr[c];
      r.db[c] += dr[c];
    }
  }
  return r;
}

// RMSNorm: out_c = x_c s w_c, s = 1/sqrt(mean(x^2) + eps). With g = w * dout,
// d out_c / d x_j = w_c (s delta_cj - x_c s^3 x_j / C), so
//   dx_j += s g_j - x_j s^3 / C * sum_c g_c x_c,   dw_c += sum_rows x_c s dout_c.
Ref rmsnorm_ref(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& d,
                const std::vector<float>& dx0, const std::vector<float>& dw0, double eps) {
  Ref r{{}, std::vector<double>(kN), std::vector<double>(kN * kC), std::vector<double>(dx0.begin(), dx0.end()),
        std::vector<double>(dw0.begin(), dw0.end()), {}};
  for (int64_t n = 0; n < kN; ++n) {
    const float* xr = x.data() + n * kC;
    const float* dr = d.data() + n * kC;
    double ms = 0;
    for (int64_t c = 0; c < kC; ++c) ms += double(xr[c]) * xr[c];
    const double s = 1.0 / std::sqrt(ms / kC + eps);
    r.rstd[n] = s;
    double sum_gx = 0;
    for (int64_t c = 0; c < kC; ++c) {
      r.out[n * kC + c] = xr[c] * s * w[c];
      sum_gx += double(w[c]) * dr[c] * xr[c];
    }
    for (int64_t j = 0; j < kC; ++j) r.dx[n * kC + j] += s * w[j] * dr[j] - xr[j] * s * s * s / kC * sum_gx;
    for (int64_t c = 0; c < kC; ++c) r.dw[c] += xr[c] * s * dr[c];
  }
  return r;
}

// LayerNorm with input (and dinp) X and output (and dout) Y against the reference, from seeds
// s..s+6: forward, recompute from the saved statistics (the same bits), backward into pre-filled
// gradients, and one thread against two.
template <class X, class Y>
void layernorm_matches_reference(uint64_t s) {
  // An offset mean, so the two-pass variance matters; one row with a variance near eps.
  std::vector<float> xs = randn(kN * kC, s, 2.0f);
  for (auto& v : xs) v += 3.0f;
  for (int64_t c = 0; c < kC; ++c) xs[kSmallRow * kC + c] = 0.01f + 0.0015f * (xs[kSmallRow * kC + c] - 3.0f);
  const auto x = stored<X>(xs), dx0 = stored<X>(randn(kN * kC, s + 2));
  const auto d = stored<Y>(randn(kN * kC, s + 1));
  const auto w = randn(kC, s + 3), b = randn(kC, s + 4), dw0 = randn(kC, s + 5), db0 = randn(kC, s + 6);
  const auto xw = widen(x);
  const Ref ref = layernorm_ref(xw, w, b, widen(d), widen(dx0), dw0, db0);
  expect_comparable_to_eps(ref.rstd[kSmallRow], kLnEps);

  std::vector<Y> out(kN * kC);
  std::vector<float> mean(kN), rstd(kN);
  layernorm_forward<X, Y>(out, mean, rstd, x, w, b, kN, kC);
  expect_mean(mean, ref.mean, xw);
  expect_rstd(rstd, ref.rstd);
  expect_rows(out, ref.out, kC, "out");
  std::vector<Y> again(kN * kC);  // recompute from the saved statistics: the same bits
  layernorm_apply<X, Y>(again, x, w, b, mean, rstd, kN, kC);
  ASSERT_TRUE(same_bits(again, out));

  auto dx = dx0;  // pre-filled: the kernel must add
  auto dw = dw0, db = db0;
  layernorm_backward<X, Y>(dx, dw, db, d, x, w, mean, rstd, kN, kC);
  expect_rows(dx, ref.dx, kC, "dinp");
  expect_rows(dw, ref.dw, kC, "dweight");
  expect_rows(db, ref.db, kC, "dbias");

  // Bit-identical for any thread count.
  auto dx1 = dx0;
  auto dw1 = dw0, db1 = db0;
  std::vector<Y> out1(kN * kC);
  std::vector<float> mean1(kN), rstd1(kN);
  const int nt = omp_get_max_threads();
  omp_set_num_threads(1);
  layernorm_forward<X, Y>(out1, mean1, rstd1, x, w, b, kN, kC);
  layernorm_backward<X, Y>(dx1, dw1, db1, d, x, w, mean, rstd, kN, kC);
  omp_set_num_threads(nt);
  EXPECT_TRUE(same_bits(out1, out) && same_bits(mean1, mean) && same_bits(rstd1, rstd));
  EXPECT_TRUE(same_bits(dx1, dx) && same_bits(dw1, dw) && same_bits(db1, db));
}

// RMSNorm the same way, from seeds s..s+4.
template <class X, class Y>
void rmsnorm_matches_reference(uint64_t s) {
  std::vector<float> xs = randn(kN * kC, s, 2.0f);
  for (int64_t c = 0; c < kC; ++c) xs[kSmallRow * kC + c] *= 0.0005f;  // mean square ~ eps
  const auto x = stored<X>(xs), dx0 = stored<X>(randn(kN * kC, s + 2));
  const auto d = stored<Y>(randn(kN * kC, s + 1));
  const auto w = randn(kC, s + 3), dw0 = randn(kC, s + 4);
  const Ref ref = rmsnorm_ref(widen(x), w, widen(d), widen(dx0), dw0, kRmsEps);
  expect_comparable_to_eps(ref.rstd[kSmallRow], kRmsEps);

  std::vector<Y> out(kN * kC);
  std::vector<float> rstd(kN);
  rmsnorm_forward<X, Y>(out, rstd, x, w, kN, kC, kRmsEps);
  expect_rstd(rstd, ref.rstd);
  expect_rows(out, ref.out, kC, "out");
  std::vector<Y> again(kN * kC);
  rmsnorm_apply<X, Y>(again, x, w, rstd, kN, kC);
  ASSERT_TRUE(same_bits(again, out));

  auto dx = dx0;
  auto dw = dw0;
  rmsnorm_backward<X, Y>(dx, dw, d, x, w, rstd, kN, kC);
  expect_rows(dx, ref.dx, kC, "dinp");
  expect_rows(dw, ref.dw, kC, "dweight");

  auto dx1 = dx0;
  auto dw1 = dw0;
  std::vector<Y> out1(kN * kC);
  std::vector<float> rstd1(kN);
  const int nt = omp_get_max_threads();
  omp_set_num_threads(1);
  rmsnorm_forward<X, Y>(out1, rstd1, x, w, kN, kC, kRmsEps);
  rmsnorm_backward<X, Y>(dx1, dw1, d, x, w, rstd, kN, kC);
  omp_set_num_threads(nt);
  EXPECT_TRUE(same_bits(out1, out) && same_bits(rstd1, rstd));
  EXPECT_TRUE(same_bits(dx1, dx) && same_bits(dw1, dw));
}

}  // namespace

TEST(NormBf16, LayerNormMatchesDoubleReference) { layernorm_matches_reference<bf16, bf16>(1); }
TEST(NormBf16, RmsNormMatchesDoubleReference) { rmsnorm_matches_reference<bf16, bf16>(11); }
// An fp32 input (not bf16-representable: the residual stream of --fp32-residual).
TEST(NormBf16, MixedLayerNormMatchesDoubleReference) { layernorm_matches_reference<float, bf16>(21); }
TEST(NormBf16, MixedRmsNormMatchesDoubleReference) { rmsnorm_matches_reference<float, bf16>(31); }
// The fp32 instantiation, held to the same reference.
TEST(NormBf16, Fp32LayerNormMatchesDoubleReference) { layernorm_matches_reference<float, float>(41); }
TEST(NormBf16, Fp32RmsNormMatchesDoubleReference) { rmsnorm_matches_reference<float, float>(51); }
