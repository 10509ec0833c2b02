#include "kernels/layernorm.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "fd_check.h"

using namespace remat::kernels;
using namespace remat::test;

TEST(LayerNorm, ForwardMatchesDoubleReference) {
  for (int64_t C : {1, 16, 37, 768}) {
    const int64_t N = 5;
    auto inp = randn(N * C, 1, 2.0f), w = randn(C, 2), b = randn(C, 3);
    for (auto& x : inp) x += 3.0f;  // nonzero mean
    std::vector<float> out(N * C), mean(N), rstd(N);
    layernorm_forward<float>(out, mean, rstd, inp, w, b, N, C);
    for (int64_t n = 0; n < N; ++n) {
      double m = 0.0, v = 0.0;
      for (int64_t c = 0; c < C; ++c) m += inp[n * C + c];
      m /= C;
      for (int64_t c = 0; c < C; ++c) v += (inp[n * C + c] - m) * (inp[n * C + c] - m);
      v /= C;
      const double s = 1.0 / std::sqrt(v + 1e-5);
      EXPECT_NEAR(mean[n], m, 1e-5 * (1 + std::fabs(m))) << "C=" << C;
      EXPECT_NEAR(rstd[n], s, 1e-4 * s) << "C=" << C;
      for (int64_t c = 0; c < C; ++c)
        ASSERT_NEAR(out[n * C + c], (inp[n * C + c] - m) * s * w[c] + b[c], 1e-4) << "C=" << C << " c=" << c;
    }
  }
}

TEST(LayerNorm, ApplyIsBitIdenticalToForward) {
  const int64_t N = 64, C = 771;  // odd C exercises the vector tail
  auto inp = randn(N * C, 4), w = randn(C, 5), b = randn(C, 6);
  std::vector<float> out(N * C), mean(N), rstd(N), out2(N * C, -1.0f);
  layernorm_forward<float>(out, mean, rstd, inp, w, b, N, C);
  layernorm_apply<float>(out2, inp, w, b, mean, rstd, N, C);
  EXPECT_TRUE(bit_equal(out, out2));
}

TEST(LayerNorm, GradientsFiniteDifference) {
  const int64_t N = 4, C = 19;
  auto inp = randn(N * C, 7), w = randn(C, 8), b = randn(C, 9);
  std::vector<float> mean(N), rstd(N), dinp(N * C), dw(C), db(C);
  fd_check(
      N * C, [&](std::span<float> out) { layernorm_forward<float>(out, mean, rstd, inp, w, b, N, C); },
      [&](std::span<const float> dout) {
        std::vector<float> out(N * C);
        layernorm_forward<float>(out, mean, rstd, inp, w, b, N, C);  // fresh mean/rstd for the current inp
        layernorm_backward<float>(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
      },
      {{"inp", &inp, &dinp}, {"weight", &w, &dw}, {"bias", &b, &db}});
}

TEST(LayerNorm, DeterministicAndThreadCountIndependent) {
  const int64_t N = 300, C = 200;
  auto inp = randn(N * C, 10), w = randn(C, 11), b = randn(C, 12), dout = randn(N * C, 13);
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    std::vector<float> out(N * C), mean(N), rstd(N), dinp(N * C, 1.0f), dw(C, 1.0f), db(C, 1.0f);
    layernorm_forward<float>(out, mean, rstd, inp, w, b, N, C);
    layernorm_backward<float>(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
    omp_set_num_threads(2);
    std::vector<float> all = out;
    for (auto* v : {&mean, &rstd, &dinp, &dw, &db}) all.insert(all.end(), v->begin(), v->end());
    return all;
  };
  const auto r1 = run(2), r2 = run(2), r3 = run(1);
  EXPECT_TRUE(bit_equal(r1, r2));
  EXPECT_TRUE(bit_equal(r1, r3));
}
