#include "kernels/rmsnorm.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "fd_check.h"

using namespace remat::kernels;
using namespace remat::test;

TEST(RmsNorm, ForwardMatchesDoubleReference) {
  for (int64_t C : {1, 16, 37, 768}) {
    for (float eps : {1e-5f, 1e-6f}) {
      const int64_t N = 5;
      auto inp = randn(N * C, 1, 2.0f), w = randn(C, 2);
      for (auto& x : inp) x += 3.0f;  // nonzero mean: RMSNorm must not subtract it
      std::vector<float> out(N * C), rstd(N);
      rmsnorm_forward<float>(out, rstd, inp, w, N, C, eps);
      for (int64_t n = 0; n < N; ++n) {
        double ms = 0.0;
        for (int64_t c = 0; c < C; ++c) ms += double(inp[n * C + c]) * inp[n * C + c];
        ms /= C;
        const double s = 1.0 / std::sqrt(ms + eps);
        EXPECT_NEAR(rstd[n], s, 1e-5 * s) << "C=" << C;
        for (int64_t c = 0; c < C; ++c) {
          const double ref = inp[n * C + c] * s * w[c];
          ASSERT_NEAR(out[n * C + c], ref, 1e-5 * (1 + std::fabs(ref))) << "C=" << C << " c=" << c;
        }
      }
    }
  }
}

TEST(RmsNorm, EpsDominatesAZeroRow) {
  const int64_t N = 1, C = 20;
  std::vector<float> inp(C, 0.0f), w = randn(C, 3), out(C, -1.0f), rstd(N);
  rmsnorm_forward<float>(out, rstd, inp, w, N, C, 1e-6f);
  EXPECT_NEAR(rstd[0], 1000.0f, 1e-2f);
  for (float o : out) EXPECT_EQ(o, 0.0f);
}

TEST(RmsNorm, ApplyIsBitIdenticalToForward) {
  const int64_t N = 64, C = 771;  // odd C exercises the vector tail
  auto inp = randn(N * C, 4), w = randn(C, 5);
  std::vector<float> out(N * C), rstd(N), out2(N * C, -1.0f);
  rmsnorm_forward<float>(out, rstd, inp, w, N, C, 1e-5f);
  rmsnorm_apply<float>(out2, inp, w, rstd, N, C);
  EXPECT_TRUE(bit_equal(out, out2));
}

TEST(RmsNorm, GradientsFiniteDifference) {
  for (auto [N, C] : {std::pair<int64_t, int64_t>{4, 19}, {1, 37}, {3, 32}}) {
    auto inp = randn(N * C, 7 + C), w = randn(C, 8 + C);
    for (auto& x : inp) x += 0.5f;  // nonzero mean
    std::vector<float> rstd(N), dinp(N * C), dw(C);
    fd_check(
        N * C, [&](std::span<float> out) { rmsnorm_forward<float>(out, rstd, inp, w, N, C, 1e-5f); },
        [&](std::span<const float> dout) {
          std::vector<float> out(N * C);
          rmsnorm_forward<float>(out, rstd, inp, w, N, C, 1e-5f);  // fresh rstd for the current inp
          rmsnorm_backward<float>(dinp, dw, dout, inp, w, rstd, N, C);
        },
        {{"inp", &inp, &dinp}, {"weight", &w, &dw}});
  }
}

TEST(RmsNorm, DeterministicAndThreadCountIndependent) {
  const int64_t N = 300, C = 200;  // C not a multiple of 16 nor of the 64-channel dweight block
  auto inp = randn(N * C, 10), w = randn(C, 11), dout = randn(N * C, 13);
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    std::vector<float> out(N * C), rstd(N), dinp(N * C, 1.0f), dw(C, 1.0f);
    rmsnorm_forward<float>(out, rstd, inp, w, N, C, 1e-5f);
    rmsnorm_backward<float>(dinp, dw, dout, inp, w, rstd, N, C);
    omp_set_num_threads(2);
    std::vector<float> all = out;
    for (auto* v : {&rstd, &dinp, &dw}) all.insert(all.end(), v->begin(), v->end());
    return all;
  };
  const auto r1 = run(2), r2 = run(2), r3 = run(1);
  EXPECT_TRUE(bit_equal(r1, r2));
  EXPECT_TRUE(bit_equal(r1, r3));
}
