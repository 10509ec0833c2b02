// GELU, SwiGLU and the residual adds on bf16 tensors, against their fp32 twins (gelu.h, swiglu.h,
// residual.h) run on the same bf16 values widened to fp32.
//
// Tolerance: one bf16 ulp of round_bf16(twin). Each bf16 kernel evaluates the twin's own expression
// in fp32 and rounds once, so the only differences are FMA contraction (a few fp32 ulps), which can
// move a value across a bf16 rounding boundary: one bf16 ulp at most. Any error in the formula, a
// missing accumulation or a second rounding shows up as many ulps.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "bf16_twin.h"
#include "fd_check.h"
#include "kernels/bf16.h"
#include "kernels/gelu.h"
#include "kernels/residual.h"
#include "kernels/swiglu.h"

using namespace remat::kernels;
using namespace remat::test;

namespace {

constexpr int64_t kN = 5000;  // several chunks and a ragged tail

}  // namespace

TEST(PointwiseBf16, GeluMatchesFp32Twin) {
  const auto x = b16(randn(kN, 1, 3.0f)), d = b16(randn(kN, 2)), dx0 = b16(randn(kN, 3));
  std::vector<bf16> out(kN);
  gelu_forward<bf16>(out, x, kN);
  std::vector<float> ref(kN);
  gelu_forward<float>(ref, f32(x), kN);
  expect_within_1ulp(out, ref, "gelu forward");
  for (bool overwrite : {false, true}) {
    auto dx = dx0;
    gelu_backward<bf16>(dx, x, d, kN, overwrite);
    auto dref = f32(dx0);
    gelu_backward<float>(dref, f32(x), f32(d), kN, overwrite);
    expect_within_1ulp(dx, dref, overwrite ? "gelu backward =" : "gelu backward +=");
  }
}

TEST(PointwiseBf16, SwigluMatchesFp32Twin) {
  const auto g = b16(randn(kN, 4, 4.0f)), u = b16(randn(kN, 5)), d = b16(randn(kN, 6));
  const auto dg0 = b16(randn(kN, 7)), du0 = b16(randn(kN, 8));
  std::vector<bf16> out(kN);
  swiglu_forward<bf16>(out, g, u, kN);
  std::vector<float> ref(kN);
  swiglu_forward<float>(ref, f32(g), f32(u), kN);
  expect_within_1ulp(out, ref, "swiglu forward");
  auto in_place = g;  // out aliasing gate
  swiglu_forward<bf16>(in_place, in_place, u, kN);
  for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(in_place[i].bits, out[i].bits) << i;
  auto dg = dg0, du = du0;
  swiglu_backward<bf16>(dg, du, d, g, u, kN);
  auto dgr = f32(dg0), dur = f32(du0);
  swiglu_backward<float>(dgr, dur, f32(d), f32(g), f32(u), kN);
  expect_within_1ulp(dg, dgr, "swiglu dgate");
  expect_within_1ulp(du, dur, "swiglu dup");
}

TEST(PointwiseBf16, ResidualMatchesFp32Twin) {
  const auto a = b16(randn(kN, 9)), b = b16(randn(kN, 10)), d = b16(randn(kN, 11));
  std::vector<bf16> out(kN);
  residual_forward<bf16>(out, a, b, kN);
  std::vector<float> ref(kN);
  residual_forward<float>(ref, f32(a), f32(b), kN);
  // A sum of two bf16 values is exact in fp32 (no contraction possible): identical bits.
  for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(out[i].bits, float_to_bf16(ref[i]).bits) << i;
  auto da = a, db = b;
  residual_backward<bf16>(da, db, d, kN);
  auto dar = f32(a), dbr = f32(b);
  residual_backward<float>(dar, dbr, f32(d), kN);
  for (int64_t i = 0; i < kN; ++i) {
    ASSERT_EQ(da[i].bits, float_to_bf16(dar[i]).bits) << i;
    ASSERT_EQ(db[i].bits, float_to_bf16(dbr[i]).bits) << i;
  }
  std::vector<bf16> copy(kN);
  assign<bf16>(copy, d, kN);
  for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(copy[i].bits, d[i].bits) << i;
  // fp32 stream plus a bf16 branch: no rounding at all.
  const auto s = randn(kN, 12);
  std::vector<float> m(kN), mref(kN);
  residual_forward<float, bf16>(m, s, b, kN);
  residual_forward<float>(mref, s, f32(b), kN);
  EXPECT_TRUE(remat::test::bit_equal(m, mref));
  auto acc = s;
  add_inplace<float, bf16>(acc, b, kN);
  EXPECT_TRUE(remat::test::bit_equal(acc, mref));
}

TEST(PointwiseBf16, ResidualMixedBackwardMatchesFp32Twin) {
  // out = a (fp32) + b (bf16) with an fp32 dout: da is the twin's exactly, db the twin's rounded once.
  const auto d = randn(kN, 13), da0 = randn(kN, 14);
  const auto db0 = b16(randn(kN, 15));
  auto da = da0;
  auto db = db0;
  residual_backward<float, bf16>(da, db, d, kN);
  auto dar = da0, dbr = f32(db0);
  residual_backward<float>(dar, dbr, d, kN);
  EXPECT_TRUE(remat::test::bit_equal(da, dar));
  for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(db[i].bits, float_to_bf16(dbr[i]).bits) << i;
}
