// The bf16 dense layers against their fp32 twins (matmul.h) run on the same bf16-rounded values.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "fd_check.h"
#include "kernels/bf16.h"
#include "kernels/matmul.h"

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
std::vector<float> absv(std::vector<float> v) {
  for (auto& x : v) x = std::fabs(x);
  return v;
}

// Tolerances. Both sides sum the same exact products in fp32 in different orders: the difference is
// under 1e-5 of the magnitude sum (|a||b| summed, computed by the fp32 kernel on absolute values). A
// bf16 result adds one rounding: at most 2^-8 relative (bf16 keeps 8 significant bits), 2^-7 with
// margin. A wrong operand, transpose, or a missing bias / accumulation term moves a result by
// O(magnitude), far outside either.
constexpr double kAcc = 1e-5, kRound = 1.0 / 128;

void expect_bf16_near(const std::vector<bf16>& got, const std::vector<float>& ref, const std::vector<float>& mag,
                      const std::string& what) {
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(bf16_to_float(got[i]), ref[i], kRound * std::fabs(ref[i]) + kAcc * mag[i] + 1e-6) << what << " at " << i;
}
void expect_f32_near(const std::vector<float>& got, const std::vector<float>& ref, const std::vector<float>& mag,
                     const std::string& what) {
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], ref[i], kAcc * mag[i] + 1e-6) << what << " at " << i;
}

}  // namespace

TEST(MatmulBf16, ForwardBackwardMatchFp32Twin) {
  for (auto [N, C, OC] : {std::tuple<int64_t, int64_t, int64_t>{37, 29, 53}, {64, 96, 160}})
    for (bool with_bias : {false, true}) {
      const auto inp = b16(randn(N * C, 1)), w = b16(randn(C * OC, 2)), dout = b16(randn(N * OC, 3));
      const auto bias = with_bias ? randn(OC, 4) : std::vector<float>{};
      const auto inpf = f32(inp), wf = f32(w), doutf = f32(dout);
      // forward
      std::vector<bf16> out(N * OC);
      matmul_forward<bf16>(out, inp, w, bias, N, C, OC);
      std::vector<float> ref(N * OC), mag(N * OC);
      matmul_forward<float>(ref, inpf, wf, bias, N, C, OC);
      matmul_forward<float>(mag, absv(inpf), absv(wf), absv(bias), N, C, OC);
      expect_bf16_near(out, ref, mag, "out");
      // backward, accumulating into noise (bf16 dinp, fp32 dweight and dbias)
      const auto dinp0 = b16(randn(N * C, 5));
      const auto dw0 = randn(C * OC, 6), db0 = randn(OC, 7);
      auto dinp = dinp0;
      auto dw = dw0, db = db0;
      matmul_backward<bf16>(dinp, dw, db, dout, inp, w, N, C, OC);
      auto dinp_ref = f32(dinp0), dw_ref = dw0, db_ref = db0;
      matmul_backward<float>(dinp_ref, dw_ref, db_ref, doutf, inpf, wf, N, C, OC);
      auto dinp_mag = absv(f32(dinp0)), dw_mag = absv(dw0), db_mag = absv(db0);
      matmul_backward<float>(dinp_mag, dw_mag, db_mag, absv(doutf), absv(inpf), absv(wf), N, C, OC);
      expect_bf16_near(dinp, dinp_ref, dinp_mag, "dinp +=");
      expect_f32_near(dw, dw_ref, dw_mag, "dweight +=");
      // dbias: the same fp32 sums in the same order as the fp32 kernel: identical bits.
      EXPECT_TRUE(remat::test::bit_equal(db, db_ref));
      // dinp_overwrite ignores what dinp held (NaN here); dinp and dbias may be skipped.
      std::vector<bf16> dinp_w(N * C, float_to_bf16(std::numeric_limits<float>::quiet_NaN()));
      auto dw2 = dw0;
      matmul_backward<bf16>(dinp_w, dw2, {}, dout, inp, w, N, C, OC, true);
      std::vector<float> fresh(N * C, 0.0f), fresh_mag(N * C, 0.0f), scratch_w(C * OC, 0.0f);
      matmul_backward<float>(fresh, scratch_w, {}, doutf, inpf, wf, N, C, OC);
      matmul_backward<float>(fresh_mag, scratch_w, {}, absv(doutf), absv(inpf), absv(wf), N, C, OC);
      expect_bf16_near(dinp_w, fresh, fresh_mag, "dinp overwrite");
      expect_f32_near(dw2, dw_ref, dw_mag, "dweight, no dbias");
    }
}

TEST(MatmulBf16, NtForwardBackwardMatchFp32Twin) {
  const int64_t N = 48, C = 64, OC = 200;  // LM head: weight (V, C)
  const auto inp = b16(randn(N * C, 11)), w = b16(randn(OC * C, 12)), dout = b16(randn(N * OC, 13));
  const auto inpf = f32(inp), wf = f32(w), doutf = f32(dout);
  std::vector<bf16> out(N * OC);
  matmul_nt_forward<bf16>(out, inp, w, N, C, OC);
  std::vector<float> ref(N * OC), mag(N * OC);
  matmul_nt_forward<float>(ref, inpf, wf, N, C, OC);
  matmul_nt_forward<float>(mag, absv(inpf), absv(wf), N, C, OC);
  expect_bf16_near(out, ref, mag, "out");
  const auto dinp0 = b16(randn(N * C, 14));
  const auto dw0 = randn(OC * C, 15);
  for (bool overwrite : {false, true}) {
    auto dinp = dinp0;
    auto dw = dw0;
    matmul_nt_backward<bf16>(dinp, dw, dout, inp, w, N, C, OC, overwrite);
    std::vector<float> dinp_ref = overwrite ? std::vector<float>(N * C, 0.0f) : f32(dinp0), dw_ref = dw0;
    std::vector<float> dinp_mag = absv(dinp_ref), dw_mag = absv(dw0);
    matmul_nt_backward<float>(dinp_ref, dw_ref, doutf, inpf, wf, N, C, OC);
    matmul_nt_backward<float>(dinp_mag, dw_mag, absv(doutf), absv(inpf), absv(wf), N, C, OC);
    expect_bf16_near(dinp, dinp_ref, dinp_mag, overwrite ? "dinp overwrite" : "dinp +=");
    expect_f32_near(dw, dw_ref, dw_mag, "dweight +=");
  }
}
