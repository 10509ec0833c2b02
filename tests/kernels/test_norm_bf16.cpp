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

// X is the type of the input and of its gradient: bf16, or float (the mixed form: --fp32-residual's
// fp32 input and dinp); the output and dout are bf16 in both: the kernels <X, bf16>.
// What the fp32 twin reads for an X input (bf16 widened, fp32 as is), and the tolerance of a dinp of X.
std::vector<float> as_f32(const std::vector<bf16>& v) { return f32(v); }
std::vector<float> as_f32(const std::vector<float>& v) { return v; }
std::vector<bf16> as_x(const std::vector<float>& v, bf16) { return b16(v); }
std::vector<float> as_x(const std::vector<float>& v, float) { return v; }
void expect_grad(const std::vector<bf16>& got, const std::vector<float>& twin, const std::string& what) {
  expect_grad_bf16(got, twin, what);
}
void expect_grad(const std::vector<float>& got, const std::vector<float>& twin, const std::string& what) {
  expect_grad_f32(got, twin, what);
}

// LayerNorm on an X input against the fp32 twin, from seeds s..s+6: forward, recompute from the saved
// statistics (the same bits), backward into pre-filled gradients, and one thread against two.
template <class X>
void layernorm_matches_twin(uint64_t s) {
  // An offset mean, so the two-pass variance matters.
  std::vector<float> xs = randn(kN * kC, s, 2.0f);
  for (auto& v : xs) v += 3.0f;
  const auto x = as_x(xs, X{}), dx0 = as_x(randn(kN * kC, s + 2), X{});
  const auto d = b16(randn(kN * kC, s + 1));
  const auto w = randn(kC, s + 3), b = randn(kC, s + 4), dw0 = randn(kC, s + 5), db0 = randn(kC, s + 6);
  std::vector<bf16> out(kN * kC);
  std::vector<float> mean(kN), rstd(kN);
  layernorm_forward<X, bf16>(out, mean, rstd, x, w, b, kN, kC);
  std::vector<float> ref(kN * kC), mref(kN), rref(kN);
  layernorm_forward<float>(ref, mref, rref, as_f32(x), w, b, kN, kC);
  expect_stats(mean, mref, "mean");
  expect_stats(rstd, rref, "rstd");
  expect_within_1ulp(out, ref, "out");
  std::vector<bf16> again(kN * kC);  // recompute from the saved statistics: the same bits
  layernorm_apply<X, bf16>(again, x, w, b, mean, rstd, kN, kC);
  ASSERT_TRUE(same_bits(again, out));

  auto dx = dx0;  // pre-filled: the kernel must add
  auto dw = dw0, db = db0;
  layernorm_backward<X, bf16>(dx, dw, db, d, x, w, mean, rstd, kN, kC);
  auto dxr = as_f32(dx0);
  auto dwr = dw0, dbr = db0;
  layernorm_backward<float>(dxr, dwr, dbr, f32(d), as_f32(x), w, mref, rref, kN, kC);
  expect_grad(dx, dxr, "dinp");
  expect_grad_f32(dw, dwr, "dweight");
  expect_grad_f32(db, dbr, "dbias");

  // Bit-identical for any thread count.
  auto dx1 = dx0;
  auto dw1 = dw0, db1 = db0;
  std::vector<bf16> out1(kN * kC);
  std::vector<float> mean1(kN), rstd1(kN);
  const int nt = omp_get_max_threads();
  omp_set_num_threads(1);
  layernorm_forward<X, bf16>(out1, mean1, rstd1, x, w, b, kN, kC);
  layernorm_backward<X, bf16>(dx1, dw1, db1, d, x, w, mean, rstd, kN, kC);
  omp_set_num_threads(nt);
  EXPECT_TRUE(same_bits(out1, out) && same_bits(mean1, mean) && same_bits(rstd1, rstd));
  EXPECT_TRUE(same_bits(dx1, dx) && same_bits(dw1, dw) && same_bits(db1, db));
}

// RMSNorm the same way, from seeds s..s+4.
template <class X>
void rmsnorm_matches_twin(uint64_t s) {
  const float eps = 1e-6f;
  const auto x = as_x(randn(kN * kC, s, 2.0f), X{}), dx0 = as_x(randn(kN * kC, s + 2), X{});
  const auto d = b16(randn(kN * kC, s + 1));
  const auto w = randn(kC, s + 3), dw0 = randn(kC, s + 4);
  std::vector<bf16> out(kN * kC);
  std::vector<float> rstd(kN);
  rmsnorm_forward<X, bf16>(out, rstd, x, w, kN, kC, eps);
  std::vector<float> ref(kN * kC), rref(kN);
  rmsnorm_forward<float>(ref, rref, as_f32(x), w, kN, kC, eps);
  expect_stats(rstd, rref, "rstd");
  expect_within_1ulp(out, ref, "out");
  std::vector<bf16> again(kN * kC);
  rmsnorm_apply<X, bf16>(again, x, w, rstd, kN, kC);
  ASSERT_TRUE(same_bits(again, out));

  auto dx = dx0;
  auto dw = dw0;
  rmsnorm_backward<X, bf16>(dx, dw, d, x, w, rstd, kN, kC);
  auto dxr = as_f32(dx0);
  auto dwr = dw0;
  rmsnorm_backward<float>(dxr, dwr, f32(d), as_f32(x), w, rref, kN, kC);
  expect_grad(dx, dxr, "dinp");
  expect_grad_f32(dw, dwr, "dweight");

  auto dx1 = dx0;
  auto dw1 = dw0;
  std::vector<bf16> out1(kN * kC);
  std::vector<float> rstd1(kN);
  const int nt = omp_get_max_threads();
  omp_set_num_threads(1);
  rmsnorm_forward<X, bf16>(out1, rstd1, x, w, kN, kC, eps);
  rmsnorm_backward<X, bf16>(dx1, dw1, d, x, w, rstd, kN, kC);
  omp_set_num_threads(nt);
  EXPECT_TRUE(same_bits(out1, out) && same_bits(rstd1, rstd));
  EXPECT_TRUE(same_bits(dx1, dx) && same_bits(dw1, dw));
}

}  // namespace

TEST(NormBf16, LayerNormMatchesFp32Twin) { layernorm_matches_twin<bf16>(1); }
TEST(NormBf16, RmsNormMatchesFp32Twin) { rmsnorm_matches_twin<bf16>(11); }
// An fp32 input (not bf16-representable: the residual stream of --fp32-residual).
TEST(NormBf16, MixedLayerNormMatchesFp32Twin) { layernorm_matches_twin<float>(21); }
TEST(NormBf16, MixedRmsNormMatchesFp32Twin) { rmsnorm_matches_twin<float>(31); }
