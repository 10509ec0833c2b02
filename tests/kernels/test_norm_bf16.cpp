// LayerNorm and RMSNorm on bf16 rows against their fp32 twins (layernorm.h, rmsnorm.h) run on the
// same bf16 values widened to fp32.
//
// Tolerances. Statistics (fp32): the same 16-lane sums of the same values; only FMA contraction can
// differ, a few fp32 ulps: 1e-6 relative. Outputs: one rounding to bf16 of a value within a few fp32
// ulps of the twin's, so one bf16 ulp. dinp: rounded once (at most 2^-8 relative, 2^-7 with margin) plus
// fp32 error of a cancelling difference, bounded by 1e-5 of the tensor's largest gradient.
// dweight/dbias (fp32, same order of summation): 1e-5 relative plus that floor. A wrong term
// (mean(g), the norm * mean(g norm) term, a missing +=) moves values by O(1) of the largest gradient.
// The *_mixed forms (fp32 input and dinp, bf16 output and dout: --fp32-residual) are held to the twin on
// the same fp32 input and the widened dout with the same tolerances, dinp being fp32 like dweight.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "bf16_twin.h"
#include "fd_check.h"
#include "kernels/bf16.h"
#include "kernels/layernorm.h"
#include "kernels/layernorm_bf16.h"
#include "kernels/rmsnorm.h"
#include "kernels/rmsnorm_bf16.h"

using namespace remat::kernels;
using namespace remat::test;

namespace {

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, double(std::fabs(x)));
  return m;
}

void expect_stats(const std::vector<float>& got, const std::vector<float>& twin, const std::string& what) {
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], twin[i], 1e-6 * std::fabs(twin[i])) << what << " " << i;
}
void expect_grad_bf16(const std::vector<bf16>& got, const std::vector<float>& twin, const std::string& what) {
  const double floor = 1e-5 * max_abs(twin);
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(bf16_to_float(got[i]), twin[i], std::fabs(twin[i]) / 128 + floor) << what << " at " << i;
}
void expect_grad_f32(const std::vector<float>& got, const std::vector<float>& twin, const std::string& what) {
  const double floor = 1e-5 * max_abs(twin);
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], twin[i], 1e-5 * std::fabs(twin[i]) + floor) << what << " at " << i;
}

// C = 1100 spans one full 1024-element chunk, a partial one and a 12-lane tail.
constexpr int64_t kN = 24, kC = 1100;

}  // namespace

TEST(NormBf16, LayerNormMatchesFp32Twin) {
  // An offset mean, so the two-pass variance matters.
  std::vector<float> xs = randn(kN * kC, 1, 2.0f);
  for (auto& v : xs) v += 3.0f;
  const auto x = b16(xs), d = b16(randn(kN * kC, 2)), dx0 = b16(randn(kN * kC, 3));
  const auto w = randn(kC, 4), b = randn(kC, 5), dw0 = randn(kC, 6), db0 = randn(kC, 7);
  std::vector<bf16> out(kN * kC);
  std::vector<float> mean(kN), rstd(kN);
  layernorm_bf16_forward(out, mean, rstd, x, w, b, kN, kC);
  std::vector<float> ref(kN * kC), mref(kN), rref(kN);
  layernorm_forward(ref, mref, rref, f32(x), w, b, kN, kC);
  expect_stats(mean, mref, "mean");
  expect_stats(rstd, rref, "rstd");
  expect_within_1ulp(out, ref, "out");
  std::vector<bf16> again(kN * kC);  // recompute from the saved statistics: the same bits
  layernorm_bf16_apply(again, x, w, b, mean, rstd, kN, kC);
  for (int64_t i = 0; i < kN * kC; ++i) ASSERT_EQ(again[i].bits, out[i].bits) << i;

  auto dx = dx0;
  auto dw = dw0, db = db0;
  layernorm_bf16_backward(dx, dw, db, d, x, w, mean, rstd, kN, kC);
  auto dxr = f32(dx0);
  auto dwr = dw0, dbr = db0;
  layernorm_backward(dxr, dwr, dbr, f32(d), f32(x), w, mref, rref, kN, kC);
  expect_grad_bf16(dx, dxr, "dinp");
  expect_grad_f32(dw, dwr, "dweight");
  expect_grad_f32(db, dbr, "dbias");

  // Bit-identical for any thread count.
  auto dx1 = dx0;
  auto dw1 = dw0, db1 = db0;
  std::vector<bf16> out1(kN * kC);
  std::vector<float> mean1(kN), rstd1(kN);
  const int nt = omp_get_max_threads();
  omp_set_num_threads(1);
  layernorm_bf16_forward(out1, mean1, rstd1, x, w, b, kN, kC);
  layernorm_bf16_backward(dx1, dw1, db1, d, x, w, mean, rstd, kN, kC);
  omp_set_num_threads(nt);
  for (int64_t i = 0; i < kN * kC; ++i) ASSERT_EQ(out1[i].bits, out[i].bits) << i;
  for (int64_t i = 0; i < kN * kC; ++i) ASSERT_EQ(dx1[i].bits, dx[i].bits) << i;
  EXPECT_TRUE(remat::test::bit_equal(mean1, mean) && remat::test::bit_equal(rstd1, rstd));
  EXPECT_TRUE(remat::test::bit_equal(dw1, dw) && remat::test::bit_equal(db1, db));
}

TEST(NormBf16, RmsNormMatchesFp32Twin) {
  const float eps = 1e-6f;
  const auto x = b16(randn(kN * kC, 11, 2.0f)), d = b16(randn(kN * kC, 12)), dx0 = b16(randn(kN * kC, 13));
  const auto w = randn(kC, 14), dw0 = randn(kC, 15);
  std::vector<bf16> out(kN * kC);
  std::vector<float> rstd(kN);
  rmsnorm_bf16_forward(out, rstd, x, w, kN, kC, eps);
  std::vector<float> ref(kN * kC), rref(kN);
  rmsnorm_forward(ref, rref, f32(x), w, kN, kC, eps);
  expect_stats(rstd, rref, "rstd");
  expect_within_1ulp(out, ref, "out");
  std::vector<bf16> again(kN * kC);
  rmsnorm_bf16_apply(again, x, w, rstd, kN, kC);
  for (int64_t i = 0; i < kN * kC; ++i) ASSERT_EQ(again[i].bits, out[i].bits) << i;

  auto dx = dx0;
  auto dw = dw0;
  rmsnorm_bf16_backward(dx, dw, d, x, w, rstd, kN, kC);
  auto dxr = f32(dx0);
  auto dwr = dw0;
  rmsnorm_backward(dxr, dwr, f32(d), f32(x), w, rref, kN, kC);
  expect_grad_bf16(dx, dxr, "dinp");
  expect_grad_f32(dw, dwr, "dweight");

  auto dx1 = dx0;
  auto dw1 = dw0;
  const int nt = omp_get_max_threads();
  omp_set_num_threads(1);
  rmsnorm_bf16_backward(dx1, dw1, d, x, w, rstd, kN, kC);
  omp_set_num_threads(nt);
  for (int64_t i = 0; i < kN * kC; ++i) ASSERT_EQ(dx1[i].bits, dx[i].bits) << i;
  EXPECT_TRUE(remat::test::bit_equal(dw1, dw));
}

TEST(NormBf16, MixedLayerNormMatchesFp32Twin) {
  // An fp32 input (not bf16-representable: the residual stream of --fp32-residual), offset mean.
  std::vector<float> x = randn(kN * kC, 21, 2.0f);
  for (auto& v : x) v += 3.0f;
  const auto d = b16(randn(kN * kC, 22));
  const auto w = randn(kC, 23), b = randn(kC, 24), dx0 = randn(kN * kC, 25), dw0 = randn(kC, 26), db0 = randn(kC, 27);
  std::vector<bf16> out(kN * kC);
  std::vector<float> mean(kN), rstd(kN);
  layernorm_mixed_forward(out, mean, rstd, x, w, b, kN, kC);
  std::vector<float> ref(kN * kC), mref(kN), rref(kN);
  layernorm_forward(ref, mref, rref, x, w, b, kN, kC);
  expect_stats(mean, mref, "mean");
  expect_stats(rstd, rref, "rstd");
  expect_within_1ulp(out, ref, "out");
  std::vector<bf16> again(kN * kC);  // recompute from the saved statistics: the same bits
  layernorm_mixed_apply(again, x, w, b, mean, rstd, kN, kC);
  for (int64_t i = 0; i < kN * kC; ++i) ASSERT_EQ(again[i].bits, out[i].bits) << i;

  auto dx = dx0, dw = dw0, db = db0;  // pre-filled: the kernel must add
  layernorm_mixed_backward(dx, dw, db, d, x, w, mean, rstd, kN, kC);
  auto dxr = dx0, dwr = dw0, dbr = db0;
  layernorm_backward(dxr, dwr, dbr, f32(d), x, w, mref, rref, kN, kC);
  expect_grad_f32(dx, dxr, "dinp");
  expect_grad_f32(dw, dwr, "dweight");
  expect_grad_f32(db, dbr, "dbias");

  auto dx1 = dx0, dw1 = dw0, db1 = db0;
  const int nt = omp_get_max_threads();
  omp_set_num_threads(1);
  layernorm_mixed_backward(dx1, dw1, db1, d, x, w, mean, rstd, kN, kC);
  omp_set_num_threads(nt);
  EXPECT_TRUE(remat::test::bit_equal(dx1, dx) && remat::test::bit_equal(dw1, dw) && remat::test::bit_equal(db1, db));
}

TEST(NormBf16, MixedRmsNormMatchesFp32Twin) {
  const float eps = 1e-6f;
  const auto x = randn(kN * kC, 31, 2.0f), dx0 = randn(kN * kC, 33);
  const auto d = b16(randn(kN * kC, 32));
  const auto w = randn(kC, 34), dw0 = randn(kC, 35);
  std::vector<bf16> out(kN * kC);
  std::vector<float> rstd(kN);
  rmsnorm_mixed_forward(out, rstd, x, w, kN, kC, eps);
  std::vector<float> ref(kN * kC), rref(kN);
  rmsnorm_forward(ref, rref, x, w, kN, kC, eps);
  expect_stats(rstd, rref, "rstd");
  expect_within_1ulp(out, ref, "out");
  std::vector<bf16> again(kN * kC);
  rmsnorm_mixed_apply(again, x, w, rstd, kN, kC);
  for (int64_t i = 0; i < kN * kC; ++i) ASSERT_EQ(again[i].bits, out[i].bits) << i;

  auto dx = dx0, dw = dw0;
  rmsnorm_mixed_backward(dx, dw, d, x, w, rstd, kN, kC);
  auto dxr = dx0, dwr = dw0;
  rmsnorm_backward(dxr, dwr, f32(d), x, w, rref, kN, kC);
  expect_grad_f32(dx, dxr, "dinp");
  expect_grad_f32(dw, dwr, "dweight");

  auto dx1 = dx0, dw1 = dw0;
  const int nt = omp_get_max_threads();
  omp_set_num_threads(1);
  rmsnorm_mixed_backward(dx1, dw1, d, x, w, rstd, kN, kC);
  omp_set_num_threads(nt);
  EXPECT_TRUE(remat::test::bit_equal(dx1, dx) && remat::test::bit_equal(dw1, dw));
}
