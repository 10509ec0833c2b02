#include "kernels/gemm.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <vector>

#include "fd_check.h"

using namespace remat::kernels;
using remat::test::bit_equal;
using remat::test::randn;

namespace {

// Naive row-major reference in double.
void ref_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
              const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double a = ta ? A[k * lda + i] : A[i * lda + k];
        const double b = tb ? B[j * ldb + k] : B[k * ldb + j];
        s += a * b;
      }
      const double c = beta == 0.0f ? 0.0 : double(beta) * C[i * ldc + j];
      C[i * ldc + j] = float(alpha * s + c);
    }
}

struct Case {
  bool ta, tb;
  int64_t M, N, K;
};

}  // namespace

TEST(Gemm, MatchesNaiveAllTransposesOddSizes) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{37, 53, 29}, {1, 17, 5}, {65, 3, 131}}) {
        // Padded leading dimensions, so lda/ldb/ldc are honoured rather than assumed tight.
        const int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
        auto A = randn((ta ? K : M) * lda, 1), B = randn((tb ? N : K) * ldb, 2), C = randn(M * ldc, 3);
        auto Cref = C;
        sgemm(ta, tb, M, N, K, 0.7f, A.data(), lda, B.data(), ldb, 0.3f, C.data(), ldc);
        ref_gemm(ta, tb, M, N, K, 0.7f, A.data(), lda, B.data(), ldb, 0.3f, Cref.data(), ldc);
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < ldc; ++j)
            ASSERT_NEAR(C[i * ldc + j], Cref[i * ldc + j], 1e-4 * (1.0 + std::fabs(Cref[i * ldc + j])))
                << "ta=" << ta << " tb=" << tb << " M=" << M << " N=" << N << " K=" << K << " at " << i << "," << j;
      }
}

TEST(Gemm, BetaZeroIgnoresGarbageInC) {
  const int64_t M = 9, N = 11, K = 7;
  auto A = randn(M * K, 4), B = randn(K * N, 5);
  std::vector<float> C(M * N, std::numeric_limits<float>::quiet_NaN()), Cref(M * N, 0.0f);
  sgemm(false, false, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, C.data(), N);
  ref_gemm(false, false, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, Cref.data(), N);
  for (int64_t i = 0; i < M * N; ++i) ASSERT_NEAR(C[i], Cref[i], 1e-4) << i;
}

TEST(Gemm, KZeroScalesC) {
  std::vector<float> C = {1, 2, 3, 4, 5, 6};
  sgemm(false, false, 2, 3, 0, 1.0f, nullptr, 1, nullptr, 3, 0.5f, C.data(), 3);
  EXPECT_EQ(C, (std::vector<float>{0.5f, 1, 1.5f, 2, 2.5f, 3}));
  sgemm(true, true, 2, 3, 0, 1.0f, nullptr, 2, nullptr, 1, 0.0f, C.data(), 3);
  EXPECT_EQ(C, (std::vector<float>(6, 0.0f)));
}

TEST(Gemm, DeterministicRunToRun) {
  const int64_t M = 256, N = 384, K = 512;
  auto A = randn(M * K, 6), B = randn(K * N, 7);
  std::vector<float> C1(M * N), C2(M * N);
  sgemm(false, true, M, N, K, 1.0f, A.data(), K, B.data(), K, 0.0f, C1.data(), N);
  sgemm(false, true, M, N, K, 1.0f, A.data(), K, B.data(), K, 0.0f, C2.data(), N);
  EXPECT_TRUE(bit_equal(C1, C2));
}

// Inside an omp parallel region every thread runs its own GEMM (oneDNN goes single-threaded there);
// each must still be correct and must not race with the others.
TEST(Gemm, CallableInsideParallelRegion) {
  const int64_t M = 64, N = 96, K = 128;
  const int nthr = 4;
  std::vector<std::vector<float>> A, B, C(nthr, std::vector<float>(M * N)), Cref(nthr, std::vector<float>(M * N));
  for (int t = 0; t < nthr; ++t) {
    A.push_back(randn(M * K, 10 + t));
    B.push_back(randn(K * N, 20 + t));
    ref_gemm(false, false, M, N, K, 1.0f, A[t].data(), K, B[t].data(), N, 0.0f, Cref[t].data(), N);
  }
#pragma omp parallel for schedule(static) num_threads(2)
  for (int t = 0; t < nthr; ++t)
    sgemm(false, false, M, N, K, 1.0f, A[t].data(), K, B[t].data(), N, 0.0f, C[t].data(), N);
  for (int t = 0; t < nthr; ++t)
    for (int64_t i = 0; i < M * N; ++i) ASSERT_NEAR(C[t][i], Cref[t][i], 1e-4 * (1.0 + std::fabs(Cref[t][i])));
}
