#include "kernels/gemm_bf16.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/allocator.h"
#include "fd_check.h"
#include "kernels/bf16.h"

using namespace remat::kernels;
using remat::test::randn;

namespace {

std::vector<bf16> to_bf16v(const std::vector<float>& v) {
  std::vector<bf16> out(v.size());
  to_bf16(out.data(), v.data(), int64_t(v.size()));
  return out;
}

// Reference on the bf16 values, accumulated in double. Also returns, per element, the magnitude
// sum_k |a b| + |bias| + |beta c| that scales the fp32 accumulation error.
void ref_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const std::vector<bf16>& A, int64_t lda,
              const std::vector<bf16>& B, int64_t ldb, float beta, const std::vector<float>& C0, int64_t ldc,
              const float* bias, std::vector<double>& ref, std::vector<double>& mag) {
  ref.assign(M * ldc, 0.0);
  mag.assign(M * ldc, 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0.0, m = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double a = bf16_to_float(ta ? A[k * lda + i] : A[i * lda + k]);
        const double b = bf16_to_float(tb ? B[j * ldb + k] : B[k * ldb + j]);
        s += a * b;
        m += std::fabs(a * b);
      }
      if (bias) s += bias[j], m += std::fabs(bias[j]);
      if (beta != 0.0f) s += double(beta) * C0[i * ldc + j], m += std::fabs(double(beta) * C0[i * ldc + j]);
      ref[i * ldc + j] = s;
      mag[i * ldc + j] = m;
    }
}

// fp32 accumulation of K products: error well under 1e-5 of the magnitude sum for these K (the
// bf16 products themselves are exact in fp32). A wrong transpose, a dropped bias or beta term moves
// an element by O(1) relative to that sum, so each would fail. A bf16 C adds one rounding: at most
// 2^-8 relative (bf16 keeps 8 significant bits); 2^-7 with margin.
constexpr double kAccTol = 1e-5;
constexpr double kBf16Rel = 1.0 / 128;

struct Case {
  int64_t M, N, K;
};

}  // namespace

TEST(GemmBf16, MatchesReferenceAllTransposesBetaBias) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (auto [M, N, K] : {Case{37, 53, 29}, Case{1, 17, 5}, Case{65, 3, 131}, Case{128, 96, 256}})
        for (float beta : {0.0f, 1.0f})
          for (bool with_bias : {false, true}) {
            const int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
            const auto A = to_bf16v(randn((ta ? K : M) * lda, 1)), B = to_bf16v(randn((tb ? N : K) * ldb, 2));
            const auto C0 = randn(M * ldc, 3), bias = randn(N, 4);
            const float* bp = with_bias ? bias.data() : nullptr;
            std::vector<double> ref, mag;
            ref_gemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C0, ldc, bp, ref, mag);
            std::vector<float> C = C0;
            if (beta == 0.0f)  // write-only: garbage must not leak through
              for (int64_t i = 0; i < M; ++i)
                for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = std::numeric_limits<float>::quiet_NaN();
            gemm_bf16(ta, tb, M, N, K, A.data(), lda, B.data(), ldb, beta, C.data(), ldc, bp);
            // bf16 C: the beta term reads the bf16-rounded C0, so the reference uses that.
            std::vector<float> C0r(C0.size());
            for (size_t i = 0; i < C0.size(); ++i) C0r[i] = round_bf16(C0[i]);
            std::vector<double> ref16, mag16;
            ref_gemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C0r, ldc, bp, ref16, mag16);
            std::vector<bf16> C16 = to_bf16v(C0);
            gemm_bf16(ta, tb, M, N, K, A.data(), lda, B.data(), ldb, beta, C16.data(), ldc, bp);
            for (int64_t i = 0; i < M; ++i)
              for (int64_t j = 0; j < ldc; ++j) {
                const int64_t x = i * ldc + j;
                const std::string at = "ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) + " M=" +
                                       std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
                                       " beta=" + std::to_string(beta) + " bias=" + std::to_string(with_bias) +
                                       " at " + std::to_string(i) + "," + std::to_string(j);
                if (j >= N) {  // padding between rows is never touched
                  ASSERT_EQ(std::bit_cast<uint32_t>(C[x]), std::bit_cast<uint32_t>(C0[x])) << at;
                  ASSERT_EQ(C16[x].bits, float_to_bf16(C0[x]).bits) << at;
                  continue;
                }
                ASSERT_NEAR(C[x], ref[x], kAccTol * mag[x] + 1e-6) << at;
                ASSERT_NEAR(bf16_to_float(C16[x]), ref16[x], kBf16Rel * std::fabs(ref16[x]) + kAccTol * mag16[x] + 1e-6)
                    << at;
              }
          }
}

TEST(GemmBf16, KZeroGivesBiasPlusBetaC) {
  std::vector<float> C = {1, 2, 3, 4, 5, 6};
  const float bias[3] = {10, 20, 30};
  gemm_bf16(false, false, 2, 3, 0, nullptr, 1, nullptr, 3, 1.0f, C.data(), 3, bias);
  EXPECT_EQ(C, (std::vector<float>{11, 22, 33, 14, 25, 36}));
  gemm_bf16(true, true, 2, 3, 0, nullptr, 2, nullptr, 1, 0.0f, C.data(), 3);
  EXPECT_EQ(C, (std::vector<float>(6, 0.0f)));
}

// Identical bits run to run for a fixed shape and thread count, at a GPT shape, for each
// transpose pattern the dense layers use (forward, dinp, dweight with beta = 1).
TEST(GemmBf16, DeterministicRunToRun) {
  const int64_t M = 512, N = 768, K = 768;
  const auto A = to_bf16v(randn(M * K, 6)), B = to_bf16v(randn(K * N, 7));
  const auto C0 = randn(K * N, 8);
  for (auto [ta, tb] : {std::pair{false, false}, std::pair{false, true}}) {
    std::vector<float> C1(M * N), C2(M * N);
    gemm_bf16(false, tb, M, N, K, A.data(), K, B.data(), tb ? K : N, 0.0f, C1.data(), N);
    gemm_bf16(false, tb, M, N, K, A.data(), K, B.data(), tb ? K : N, 0.0f, C2.data(), N);
    EXPECT_TRUE(remat::test::bit_equal(C1, C2)) << "tb=" << tb;
    (void)ta;
  }
  // dW (K x N) += A^T (K x M) @ dout (M x N)
  const auto D = to_bf16v(randn(M * N, 9));
  std::vector<float> W1 = C0, W2 = C0;
  gemm_bf16(true, false, K, N, M, A.data(), K, D.data(), N, 1.0f, W1.data(), N);
  gemm_bf16(true, false, K, N, M, A.data(), K, D.data(), N, 1.0f, W2.data(), N);
  EXPECT_TRUE(remat::test::bit_equal(W1, W2));
  std::vector<bf16> O1(M * N), O2(M * N);
  gemm_bf16(false, false, M, N, K, A.data(), K, B.data(), N, 0.0f, O1.data(), N);
  gemm_bf16(false, false, M, N, K, A.data(), K, B.data(), N, 0.0f, O2.data(), N);
  for (int64_t i = 0; i < M * N; ++i) ASSERT_EQ(O1[i].bits, O2[i].bits) << i;
}

TEST(GemmBf16, CallableInsideParallelRegion) {
  const int64_t M = 64, N = 96, K = 128;
  const int nthr = 4;
  std::vector<std::vector<bf16>> A, B;
  std::vector<std::vector<float>> C(nthr, std::vector<float>(M * N));
  std::vector<std::vector<double>> ref(nthr), mag(nthr);
  for (int t = 0; t < nthr; ++t) {
    A.push_back(to_bf16v(randn(M * K, 10 + t)));
    B.push_back(to_bf16v(randn(K * N, 20 + t)));
    ref_gemm(false, false, M, N, K, A[t], K, B[t], N, 0.0f, C[t], N, nullptr, ref[t], mag[t]);
  }
#pragma omp parallel for schedule(static) num_threads(2)
  for (int t = 0; t < nthr; ++t)
    gemm_bf16(false, false, M, N, K, A[t].data(), K, B[t].data(), N, 0.0f, C[t].data(), N);
  for (int t = 0; t < nthr; ++t)
    for (int64_t i = 0; i < M * N; ++i) ASSERT_NEAR(C[t][i], ref[t][i], kAccTol * mag[t][i] + 1e-6);
}

TEST(GemmBf16, CachesPrimitivesAndAccountsScratchpad) {
  const int64_t M = 33, N = 45, K = 57;
  const auto A = to_bf16v(randn(M * K, 30)), B = to_bf16v(randn(K * N, 31));
  std::vector<float> C(M * N);
  gemm_bf16(false, false, M, N, K, A.data(), K, B.data(), N, 0.0f, C.data(), N);
  const int64_t n = gemm_bf16_cached_primitives();
  gemm_bf16(false, false, M, N, K, A.data(), K, B.data(), N, 0.0f, C.data(), N);
  EXPECT_EQ(gemm_bf16_cached_primitives(), n);  // same key: reused
  gemm_bf16(false, false, M, N, K, A.data(), K, B.data(), N, 1.0f, C.data(), N);
  EXPECT_EQ(gemm_bf16_cached_primitives(), n + 1);  // beta is part of the key
  const auto names = remat::Allocator::global().by_name();
  auto it = names.find("gemm_bf16.scratchpad");
  if (it != names.end()) {  // oneDNN asked for scratch: it came from the allocator and went back
    EXPECT_GT(it->second.peak, 0u);
    EXPECT_EQ(it->second.active, 0u);
  }
  EXPECT_NE(std::string(gemm_bf16_impl(false, false, M, N, K, false)), "");
}
