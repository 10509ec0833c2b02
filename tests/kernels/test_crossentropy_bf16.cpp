// Softmax cross-entropy (crossentropy.h) on bf16 and on fp32 logits against an independent reference
// written here as plain loops in double precision: lse = max + log(sum exp(x - max)), loss =
// lse - x[target] (0 for an ignored row), and dlogits = dlogits0 + dloss * (exp(x - lse) -
// onehot(target)), with dlogits0 taken as 0 under `overwrite` and ignored rows left untouched (or
// zeroed under `overwrite`). The kernel is one template over the storage type, so a bf16 result is not
// compared with the fp32 kernel's (that would compare the template with itself). A bf16 run's
// reference takes the bf16 logits widened to fp32.
//
// Tolerances. lse and losses (fp32 in both forms): within 1e-6 of the largest |lse| (the kernel's exp
// is accurate to ~1 fp32 ulp and its sum to ~1e-7 relative; lse itself is rounded to fp32, ~1e-6 at
// lse ~ 17, i.e. ~6e-8 of it). dlogits: rounding lse, and x - lse, to fp32 moves each exp(x - lse) by
// up to ~2e-6 relative, so an fp32 gradient must be within 1e-5 of the magnitude of its terms,
// |dlogits0| + |dloss| (p + onehot), element by element; a bf16 one within one bf16 ulp of the double
// result rounded to bf16, or within that same bound where the terms cancel to near zero. A
// per-element bound (not one of the tensor's largest value) holds the many tiny softmax values to
// their own size. A wrong lse, a missing one-hot term, a zero, negated or non-accumulated gradient or
// a second rounding is far outside.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "bf16_twin.h"
#include "fd_check.h"
#include "kernels/bf16.h"
#include "kernels/crossentropy.h"

using namespace remat::kernels;
using namespace remat::test;

namespace {

constexpr int64_t kN = 13, kV = 2053;  // two full chunks and a ragged one; a 5-lane vector tail


// The reference forward, in double: lse and losses per row.
void reference_forward(std::vector<double>& lse, std::vector<double>& loss, const std::vector<float>& x,
                       const std::vector<int32_t>& t) {
  for (int64_t n = 0; n < kN; ++n) {
    const float* xr = x.data() + n * kV;
    double mx = xr[0];
    for (int64_t j = 1; j < kV; ++j) mx = std::max(mx, double(xr[j]));
    double sum = 0;
    for (int64_t j = 0; j < kV; ++j) sum += std::exp(double(xr[j]) - mx);
    lse[n] = mx + std::log(sum);
    loss[n] = t[n] < 0 ? 0.0 : lse[n] - xr[t[n]];
  }
}

// The reference backward, in double: want[i] and the magnitude of its terms, scale[i] (the bound on a
// cancellation's error).
void reference_backward(std::vector<double>& want, std::vector<double>& scale, const std::vector<float>& d0,
                        const std::vector<float>& dl, const std::vector<float>& x, const std::vector<double>& lse,
                        const std::vector<int32_t>& t, bool overwrite) {
  for (int64_t n = 0; n < kN; ++n)
    for (int64_t j = 0; j < kV; ++j) {
      const int64_t i = n * kV + j;
      const double old = overwrite ? 0.0 : double(d0[i]);
      if (t[n] < 0) {  // ignored row: no gradient
        want[i] = old;
        scale[i] = std::fabs(old);
        continue;
      }
      const double p = std::exp(double(x[i]) - lse[n]), onehot = j == t[n] ? 1.0 : 0.0;
      want[i] = old + double(dl[n]) * (p - onehot);
      scale[i] = std::fabs(old) + std::fabs(double(dl[n])) * (p + onehot);
    }
}

void expect_grad(const std::vector<float>& got, const std::vector<double>& want, const std::vector<double>& scale,
                 const std::string& what) {
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_LE(std::fabs(double(got[i]) - want[i]), 1e-5 * scale[i])
        << what << " at " << i << ": " << got[i] << " vs " << want[i];
}
void expect_grad(const std::vector<bf16>& got, const std::vector<double>& want, const std::vector<double>& scale,
                 const std::string& what) {
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = bf16_to_float(got[i]);
    if (std::abs(ord(got[i]) - ord(float_to_bf16(float(want[i])))) <= 1 || std::fabs(g - want[i]) <= 1e-5 * scale[i])
      continue;
    FAIL() << what << " at " << i << ": " << g << " vs " << want[i];
  }
}

template <class S>
void crossentropy_matches_reference() {
  const auto x = stored<S>(randn(kN * kV, 1, 4.0f));
  const auto xw = widen(x);
  std::vector<int32_t> t(kN);
  for (int64_t n = 0; n < kN; ++n) t[n] = int32_t((n * 977 + 5) % kV);
  t[3] = -1;    // ignored
  t[7] = 1024;  // first element of the second chunk
  std::vector<double> lse_ref(kN), loss_ref(kN);
  reference_forward(lse_ref, loss_ref, xw, t);
  double lse_max = 0;
  for (double l : lse_ref) lse_max = std::max(lse_max, std::fabs(l));

  std::vector<float> loss(kN), lse(kN);
  crossentropy_forward<S>(loss, lse, x, t.data(), kN, kV);
  for (int64_t n = 0; n < kN; ++n) {
    ASSERT_NEAR(lse[n], lse_ref[n], 1e-6 * lse_max) << "lse " << n;
    ASSERT_NEAR(loss[n], loss_ref[n], 1e-6 * lse_max) << "loss " << n;
  }
  EXPECT_EQ(loss[3], 0.0f);

  const auto dl = randn(kN, 2);
  const auto d0 = stored<S>(randn(kN * kV, 3));
  std::vector<double> want(kN * kV), scale(kN * kV);
  for (bool overwrite : {false, true}) {
    const std::string what = overwrite ? "overwrite" : "accumulate";
    reference_backward(want, scale, widen(d0), dl, xw, lse_ref, t, overwrite);
    auto dx = d0;
    crossentropy_backward<S>(dx, dl, x, lse, t.data(), kN, kV, overwrite);
    expect_grad(dx, want, scale, what);
    for (int64_t j = 0; j < kV; ++j)  // ignored row: untouched, or +0 with overwrite (bit for bit)
      ASSERT_TRUE(same_bits(std::vector<S>{dx[3 * kV + j]}, std::vector<S>{overwrite ? S{0} : d0[3 * kV + j]})) << j;
    if (overwrite) {  // in place over the logits: the same bits
      auto in_place = x;
      crossentropy_backward<S>(in_place, dl, in_place, lse, t.data(), kN, kV, true);
      ASSERT_TRUE(same_bits(in_place, dx)) << "in place";
    }
  }
}

}  // namespace

TEST(CrossEntropyBf16, MatchesDoubleReferenceInPlaceAndIgnoredRows) { crossentropy_matches_reference<bf16>(); }
// The fp32 instantiation, held to the same reference.
TEST(CrossEntropyBf16, Fp32MatchesDoubleReferenceInPlaceAndIgnoredRows) { crossentropy_matches_reference<float>(); }
