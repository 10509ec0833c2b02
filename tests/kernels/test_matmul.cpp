#include "kernels/matmul.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "fd_check.h"

using namespace remat::kernels;
using namespace remat::test;

TEST(Matmul, ForwardMatchesNaive) {
  const int64_t N = 7, C = 13, OC = 19;
  auto inp = randn(N * C, 1), w = randn(C * OC, 2), b = randn(OC, 3);
  std::vector<float> out(N * OC, 123.0f), out_nb(N * OC, 123.0f);
  matmul_forward<float>(out, inp, w, b, N, C, OC);
  matmul_forward<float>(out_nb, inp, w, {}, N, C, OC);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < OC; ++o) {
      double s = 0.0;
      for (int64_t c = 0; c < C; ++c) s += double(inp[n * C + c]) * w[c * OC + o];
      EXPECT_NEAR(out_nb[n * OC + o], s, 1e-4);
      EXPECT_NEAR(out[n * OC + o], s + b[o], 1e-4);
    }
}

TEST(Matmul, GradientsFiniteDifference) {
  const int64_t N = 6, C = 8, OC = 5;
  auto inp = randn(N * C, 4), w = randn(C * OC, 5), b = randn(OC, 6);
  std::vector<float> dinp(N * C), dw(C * OC), db(OC);
  fd_check(
      N * OC, [&](std::span<float> out) { matmul_forward<float>(out, inp, w, b, N, C, OC); },
      [&](std::span<const float> dout) { matmul_backward<float>(dinp, dw, db, dout, inp, w, N, C, OC); },
      {{"inp", &inp, &dinp}, {"weight", &w, &dw}, {"bias", &b, &db}});
}

TEST(Matmul, EmptyDinpAndDbiasAreSkipped) {
  const int64_t N = 5, C = 4, OC = 3;
  auto inp = randn(N * C, 7), w = randn(C * OC, 8), dout = randn(N * OC, 9);
  std::vector<float> dinp(N * C), dw1(C * OC), db(OC), dw2(C * OC);
  matmul_backward<float>(dinp, dw1, db, dout, inp, w, N, C, OC);
  matmul_backward<float>({}, dw2, {}, dout, inp, w, N, C, OC);
  EXPECT_TRUE(bit_equal(dw1, dw2));
  for (int64_t o = 0; o < OC; ++o) {
    double s = 0.0;
    for (int64_t n = 0; n < N; ++n) s += dout[n * OC + o];
    EXPECT_NEAR(db[o], s, 1e-5);
  }
}

TEST(MatmulNT, MatchesMatmulWithTransposedWeight) {
  const int64_t N = 9, C = 11, OC = 23;
  auto inp = randn(N * C, 10), wt = randn(OC * C, 11), dout = randn(N * OC, 12);
  std::vector<float> w(C * OC);  // w[c, o] = wt[o, c]
  for (int64_t o = 0; o < OC; ++o)
    for (int64_t c = 0; c < C; ++c) w[c * OC + o] = wt[o * C + c];
  std::vector<float> out1(N * OC), out2(N * OC);
  matmul_nt_forward<float>(out1, inp, wt, N, C, OC);
  matmul_forward<float>(out2, inp, w, {}, N, C, OC);
  for (int64_t i = 0; i < N * OC; ++i) EXPECT_NEAR(out1[i], out2[i], 1e-5);

  std::vector<float> dinp1(N * C), dwt(OC * C), dinp2(N * C), dw(C * OC), db(OC);
  matmul_nt_backward<float>(dinp1, dwt, dout, inp, wt, N, C, OC);
  matmul_backward<float>(dinp2, dw, db, dout, inp, w, N, C, OC);
  for (int64_t i = 0; i < N * C; ++i) EXPECT_NEAR(dinp1[i], dinp2[i], 1e-5);
  for (int64_t o = 0; o < OC; ++o)
    for (int64_t c = 0; c < C; ++c) EXPECT_NEAR(dwt[o * C + c], dw[c * OC + o], 1e-5);
}

TEST(MatmulNT, GradientsFiniteDifference) {
  const int64_t N = 5, C = 7, OC = 9;
  auto inp = randn(N * C, 13), wt = randn(OC * C, 14);
  std::vector<float> dinp(N * C), dwt(OC * C);
  fd_check(
      N * OC, [&](std::span<float> out) { matmul_nt_forward<float>(out, inp, wt, N, C, OC); },
      [&](std::span<const float> dout) { matmul_nt_backward<float>(dinp, dwt, dout, inp, wt, N, C, OC); },
      {{"inp", &inp, &dinp}, {"weight", &wt, &dwt}});
}

TEST(Matmul, BackwardDeterministic) {
  const int64_t N = 512, C = 96, OC = 200;
  auto inp = randn(N * C, 15), w = randn(C * OC, 16), dout = randn(N * OC, 17);
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    std::vector<float> dinp(N * C), dw(C * OC), db(OC);
    matmul_backward<float>(dinp, dw, db, dout, inp, w, N, C, OC);
    omp_set_num_threads(2);
    return std::tuple{dinp, dw, db};
  };
  auto [a1, b1, c1] = run(2);
  auto [a2, b2, c2] = run(2);
  EXPECT_TRUE(bit_equal(a1, a2));
  EXPECT_TRUE(bit_equal(b1, b2));
  EXPECT_TRUE(bit_equal(c1, c2));
  auto [a3, b3, c3] = run(1);
  EXPECT_TRUE(bit_equal(c1, c3)) << "dbias must not depend on the thread count";
}

TEST(Matmul, DinpOverwriteIgnoresOldContentsAndEqualsAccumulatingIntoZero) {
  const int64_t N = 37, C = 24, OC = 40;
  auto inp = randn(N * C, 17), w = randn(C * OC, 18), wt = randn(OC * C, 19), dout = randn(N * OC, 20);
  std::vector<float> zero(N * C, 0.0f), garbage = randn(N * C, 21, 100.0f);
  std::vector<float> dw_a(C * OC), dw_b(C * OC), db_a(OC), db_b(OC);
  matmul_backward<float>(zero, dw_a, db_a, dout, inp, w, N, C, OC);
  matmul_backward<float>(garbage, dw_b, db_b, dout, inp, w, N, C, OC, /*dinp_overwrite=*/true);
  for (int64_t i = 0; i < N * C; ++i) ASSERT_FLOAT_EQ(zero[i], garbage[i]) << i;
  EXPECT_TRUE(bit_equal(dw_a, dw_b));  // dweight still accumulates
  std::vector<float> zero_nt(N * C, 0.0f), garbage_nt = randn(N * C, 22, 100.0f), dw_c(OC * C), dw_d(OC * C);
  matmul_nt_backward<float>(zero_nt, dw_c, dout, inp, wt, N, C, OC);
  matmul_nt_backward<float>(garbage_nt, dw_d, dout, inp, wt, N, C, OC, /*dinp_overwrite=*/true);
  for (int64_t i = 0; i < N * C; ++i) ASSERT_FLOAT_EQ(zero_nt[i], garbage_nt[i]) << i;
}
