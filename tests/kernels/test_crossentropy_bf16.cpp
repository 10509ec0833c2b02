// Cross-entropy from bf16 logits against the fp32 twin (crossentropy.h) on the same values widened.
//
// Tolerances. lse and losses are fp32 from the same 16-lane max, exp_fast and tree sum as the twin:
// only FMA contraction may differ, 1e-6 relative (of lse; a loss is lse minus a logit, so its error
// is bounded by lse's). dlogits are one bf16 rounding of a value within a few fp32 ulps of the
// twin's: one bf16 ulp. A wrong lse, a missing one-hot term or a second rounding is far outside.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <vector>

#include "fd_check.h"
#include "kernels/bf16.h"
#include "kernels/crossentropy.h"

using namespace remat::kernels;
using remat::test::randn;

namespace {

std::vector<bf16> b16(const std::vector<float>& v) {
  std::vector<bf16> o(v.size());
  to_bf16(o.data(), v.data(), int64_t(v.size()));
  return o;
}
std::vector<float> f32(const std::vector<bf16>& v) {
  std::vector<float> o(v.size());
  to_float(o.data(), v.data(), int64_t(v.size()));
  return o;
}
int ord(bf16 h) { return (h.bits & 0x8000) ? -int(h.bits & 0x7FFF) : int(h.bits); }

}  // namespace

TEST(CrossEntropyBf16, MatchesFp32TwinInPlaceAndIgnoredRows) {
  const int64_t N = 13, V = 2053;  // two full chunks and a ragged one; a 5-lane vector tail
  const auto x = b16(randn(N * V, 1, 4.0f));
  std::vector<int32_t> t(N);
  for (int64_t n = 0; n < N; ++n) t[n] = int32_t((n * 977 + 5) % V);
  t[3] = -1;  // ignored
  t[7] = 1024;  // first element of the second chunk
  std::vector<float> loss(N), lse(N), lref(N), lseref(N);
  crossentropy_forward<bf16>(loss, lse, x, t.data(), N, V);
  const auto xf = f32(x);
  crossentropy_forward<float>(lref, lseref, xf, t.data(), N, V);
  for (int64_t n = 0; n < N; ++n) {
    ASSERT_NEAR(lse[n], lseref[n], 1e-6 * std::fabs(lseref[n])) << n;
    ASSERT_NEAR(loss[n], lref[n], 1e-6 * std::fabs(lseref[n])) << n;
  }
  EXPECT_EQ(loss[3], 0.0f);
  const auto dl = randn(N, 2);
  const auto d0 = b16(randn(N * V, 3));
  for (bool overwrite : {false, true}) {
    auto dx = d0;
    crossentropy_backward<bf16>(dx, dl, x, lse, t.data(), N, V, overwrite);
    auto dref = overwrite ? std::vector<float>(N * V, 7.0f) : f32(d0);
    crossentropy_backward<float>(dref, dl, xf, lseref, t.data(), N, V, overwrite);
    for (int64_t i = 0; i < N * V; ++i)
      ASSERT_LE(std::abs(ord(dx[i]) - ord(float_to_bf16(dref[i]))), 1)
          << (overwrite ? "overwrite" : "accumulate") << " at " << i << ": " << bf16_to_float(dx[i]) << " vs "
          << dref[i];
    for (int64_t j = 0; j < V; ++j)  // ignored row: untouched, or zero with overwrite
      ASSERT_EQ(dx[3 * V + j].bits, overwrite ? uint16_t(0) : d0[3 * V + j].bits) << j;
    if (overwrite) {  // in place over the logits: the same bits
      auto in_place = x;
      crossentropy_backward<bf16>(in_place, dl, in_place, lse, t.data(), N, V, true);
      for (int64_t i = 0; i < N * V; ++i) ASSERT_EQ(in_place[i].bits, dx[i].bits) << i;
    }
  }
}
