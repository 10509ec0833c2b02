// GELU, SwiGLU and the residual adds, fp32 and bf16, against independent references written here as
// plain loops: GELU and SwiGLU and their derivatives in double precision from the textbook formulas
// (GELU's tanh form, Hendrycks and Gimpel 2016; SwiGLU, Shazeer 2020), the residual adds in fp32. The
// kernels are one template over the storage type, so a bf16 result is not compared with the fp32
// kernel's (that would compare the template with itself).
//
// Tolerances. fp32 against double: 1e-5 of the tensor's largest value (the kernel's exp and tanh are
// accurate to ~1e-6 relative). bf16: one bf16 ulp of the double result rounded to bf16 (the kernel
// computes in fp32 and rounds once; its fp32 error can move a value across one bf16 rounding boundary),
// or, where a backward's += cancels to near zero, 1e-5 of the tensor's largest value. A wrong formula,
// a missing accumulation or a second rounding shows up as many ulps.
#include <gtest/gtest.h>

#include <algorithm>
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

// The references, in double.
double gelu_ref(double x) {
  const double k = std::sqrt(2.0 / M_PI), u = k * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + std::tanh(u));
}
double gelu_grad_ref(double x) {
  const double k = std::sqrt(2.0 / M_PI), t = std::tanh(k * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
}
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// got (bf16) within one bf16 ulp of the rounded reference, or 1e-5 of the largest |want|.
void expect_bf16(const std::vector<bf16>& got, const std::vector<double>& want, const std::string& what) {
  std::vector<float> w(want.begin(), want.end());
  expect_within_1ulp(got, w, what, 1e-5);
}

}  // namespace

TEST(Pointwise, GeluMatchesDoubleReference) {
  const auto xf = randn(kN, 1, 3.0f), df = randn(kN, 2), dx0f = randn(kN, 3);
  const auto xb = b16(xf), db = b16(df), dx0b = b16(dx0f);
  for (bool bf : {false, true}) {
    // The inputs the kernel sees, widened: a bf16 run's reference takes the rounded inputs.
    const auto x = bf ? widen(xb) : xf, d = bf ? widen(db) : df, dx0 = bf ? widen(dx0b) : dx0f;
    std::vector<double> y(kN);
    for (int64_t i = 0; i < kN; ++i) y[i] = gelu_ref(x[i]);
    for (bool overwrite : {false, true}) {
      std::vector<double> dx(kN);
      for (int64_t i = 0; i < kN; ++i) dx[i] = (overwrite ? 0.0 : double(dx0[i])) + gelu_grad_ref(x[i]) * d[i];
      const std::string what = std::string(bf ? "bf16" : "fp32") + (overwrite ? " gelu backward =" : " gelu backward +=");
      if (bf) {
        std::vector<bf16> out(kN), g = dx0b;
        gelu_forward<bf16>(out, xb, kN);
        expect_bf16(out, y, "bf16 gelu forward");
        gelu_backward<bf16>(g, xb, db, kN, overwrite);
        expect_bf16(g, dx, what);
      } else {
        std::vector<float> out(kN), g = dx0f;
        gelu_forward<float>(out, xf, kN);
        expect_close(out, y, "fp32 gelu forward");
        gelu_backward<float>(g, xf, df, kN, overwrite);
        expect_close(g, dx, what);
      }
    }
  }
}

TEST(Pointwise, SwigluMatchesDoubleReference) {
  const auto gf = randn(kN, 4, 4.0f), uf = randn(kN, 5), df = randn(kN, 6), dg0f = randn(kN, 7), du0f = randn(kN, 8);
  const auto gb = b16(gf), ub = b16(uf), db = b16(df), dg0b = b16(dg0f), du0b = b16(du0f);
  for (bool bf : {false, true}) {
    const auto g = bf ? widen(gb) : gf, u = bf ? widen(ub) : uf, d = bf ? widen(db) : df;
    const auto dg0 = bf ? widen(dg0b) : dg0f, du0 = bf ? widen(du0b) : du0f;
    std::vector<double> y(kN), dg(kN), du(kN);
    for (int64_t i = 0; i < kN; ++i) {
      const double s = sigmoid(g[i]);
      y[i] = double(g[i]) * s * u[i];
      dg[i] = dg0[i] + double(d[i]) * u[i] * (s + double(g[i]) * s * (1.0 - s));
      du[i] = du0[i] + double(d[i]) * g[i] * s;
    }
    if (bf) {
      std::vector<bf16> out(kN), dgk = dg0b, duk = du0b;
      swiglu_forward<bf16>(out, gb, ub, kN);
      expect_bf16(out, y, "bf16 swiglu forward");
      auto in_place = gb;  // out aliasing gate
      swiglu_forward<bf16>(in_place, in_place, ub, kN);
      EXPECT_TRUE(same_bits(in_place, out)) << "bf16 swiglu in place";
      swiglu_backward<bf16>(dgk, duk, db, gb, ub, kN);
      expect_bf16(dgk, dg, "bf16 swiglu dgate");
      expect_bf16(duk, du, "bf16 swiglu dup");
    } else {
      std::vector<float> out(kN), dgk = dg0f, duk = du0f;
      swiglu_forward<float>(out, gf, uf, kN);
      expect_close(out, y, "fp32 swiglu forward");
      swiglu_backward<float>(dgk, duk, df, gf, uf, kN);
      expect_close(dgk, dg, "fp32 swiglu dgate");
      expect_close(duk, du, "fp32 swiglu dup");
    }
  }
}

TEST(Pointwise, ResidualMatchesPlainLoops) {
  // The adds in fp32 in a plain loop, then one rounding to bf16: the kernel must give those bits.
  const auto af = randn(kN, 9), bfv = randn(kN, 10), df = randn(kN, 11);
  const auto a = b16(af), b = b16(bfv), d = b16(df);
  const auto aw = widen(a), bw = widen(b), dw = widen(d);
  std::vector<bf16> out(kN);
  residual_forward<bf16>(out, a, b, kN);
  for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(out[i].bits, float_to_bf16(aw[i] + bw[i]).bits) << i;
  auto da = a, db = b;
  residual_backward<bf16>(da, db, d, kN);
  for (int64_t i = 0; i < kN; ++i) {
    ASSERT_EQ(da[i].bits, float_to_bf16(aw[i] + dw[i]).bits) << i;
    ASSERT_EQ(db[i].bits, float_to_bf16(bw[i] + dw[i]).bits) << i;
  }
  std::vector<bf16> copy(kN);
  assign<bf16>(copy, d, kN);
  EXPECT_TRUE(same_bits(copy, d));
  // fp32 on both sides, and an fp32 stream plus a bf16 branch: no rounding at all.
  std::vector<float> f(kN), m(kN), acc = af;
  residual_forward<float>(f, af, bfv, kN);
  residual_forward<float, bf16>(m, af, b, kN);
  add_inplace<float, bf16>(acc, b, kN);
  for (int64_t i = 0; i < kN; ++i) {
    ASSERT_EQ(f[i], af[i] + bfv[i]) << i;
    ASSERT_EQ(m[i], af[i] + bw[i]) << i;
    ASSERT_EQ(acc[i], af[i] + bw[i]) << i;
  }
}

TEST(Pointwise, ResidualMixedBackwardMatchesPlainLoops) {
  // out = a (fp32) + b (bf16) with an fp32 dout: da += dout exactly, db += dout rounded once.
  const auto d = randn(kN, 13), da0 = randn(kN, 14);
  const auto db0 = b16(randn(kN, 15));
  const auto db0w = widen(db0);
  auto da = da0;
  auto db = db0;
  residual_backward<float, bf16>(da, db, d, kN);
  for (int64_t i = 0; i < kN; ++i) {
    ASSERT_EQ(da[i], da0[i] + d[i]) << i;
    ASSERT_EQ(db[i].bits, float_to_bf16(db0w[i] + d[i]).bits) << i;
  }
}
