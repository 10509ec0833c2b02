// Shared attention micro-kernel (attention_tile.h): tile::gemm in every causal mode against a
// double-precision product, the masked modes against the unmasked one (exactly), the row scale, and
// the packing helpers. Odd sizes exercise the partial register blocks and masked vector tails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/attention_tile.h"

using namespace remat::kernels;
using tile::Tri;

namespace {

std::vector<float> random_floats(size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(g);
  return v;
}

// Whether output (r, n) is defined by `tri` (LanesFrom / ColsTo leave some entries unwritten).
bool needed(Tri tri, int64_t d0, int64_t r, int64_t n) {
  if (tri == Tri::LanesFrom) return n >= r + d0;
  if (tri == Tri::ColsTo) return n <= r - d0;
  return true;
}

// Whether A(r, k) must hold a zero for `tri` (KFrom / KTo skip those terms).
bool a_masked(Tri tri, int64_t d0, int64_t r, int64_t k) {
  if (tri == Tri::KFrom) return k < r + d0;
  if (tri == Tri::KTo) return k > r - d0;
  return false;
}

struct Case {
  Tri tri;
  int64_t d0, M, N, K;
  bool acc, row_scale;
};

}  // namespace

TEST(AttentionTile, GemmMatchesReferenceInEveryMode) {
  std::vector<Case> cases;
  for (Tri tri : {Tri::None, Tri::LanesFrom, Tri::ColsTo, Tri::KFrom, Tri::KTo})
    for (int64_t d0 : {-64, -16, 0, 5})
      for (int64_t M : {1, 17, 65, 100})
        for (int64_t N : {1, 17, 64, 129})
          for (int64_t K : {1, 17, 65})
            for (bool acc : {false, true})
              cases.push_back({tri, d0, M, N, K, acc, acc && (tri == Tri::None || tri == Tri::KTo) && N % 2});
  for (const Case& c : cases) {
    const int64_t sa_r = c.K + 3, ldb = c.N + 5, ldc = c.N + 7;  // padded strides
    auto A = random_floats(size_t(c.M * sa_r), 1), B = random_floats(size_t(c.K * ldb), 2);
    auto C0 = random_floats(size_t(c.M * ldc), 3), rs = random_floats(size_t(c.M), 4);
    for (int64_t r = 0; r < c.M; ++r)
      for (int64_t k = 0; k < c.K; ++k)
        if (a_masked(c.tri, c.d0, r, k)) A[r * sa_r + k] = 0.f;
    std::vector<float> C = C0, Cfull = C0;
    const float* rsp = c.row_scale ? rs.data() : nullptr;
    tile::gemm(c.acc, c.tri, c.d0, c.M, c.N, c.K, A.data(), sa_r, 1, B.data(), ldb, C.data(), ldc, rsp);
    tile::gemm(c.acc, Tri::None, 0, c.M, c.N, c.K, A.data(), sa_r, 1, B.data(), ldb, Cfull.data(), ldc, rsp);
    for (int64_t r = 0; r < c.M; ++r)
      for (int64_t n = 0; n < ldc; ++n) {
        const float got = C[r * ldc + n];
        if (n >= c.N) {  // columns past N are never touched
          ASSERT_EQ(got, C0[r * ldc + n]);
          continue;
        }
        if (!needed(c.tri, c.d0, r, n)) continue;
        double ref = c.acc ? double(C0[r * ldc + n]) * (rsp ? rs[r] : 1.f) : 0.0;
        for (int64_t k = 0; k < c.K; ++k) ref += double(A[r * sa_r + k]) * B[k * ldb + n];
        ASSERT_NEAR(got, ref, 1e-5 * (1.0 + std::abs(ref)))
            << "tri=" << int(c.tri) << " d0=" << c.d0 << " M=" << c.M << " N=" << c.N << " K=" << c.K << " r=" << r
            << " n=" << n;
        // Skipped work only multiplies zeros: the same float as the unmasked product.
        ASSERT_EQ(got, Cfull[r * ldc + n]) << "tri=" << int(c.tri) << " d0=" << c.d0 << " r=" << r << " n=" << n;
      }
  }
}

TEST(AttentionTile, GemmReadsTransposedA) {
  // A(r, k) = At[k * lda + r]: the A^T operands of the kernels (sa_r = 1).
  const int64_t M = 70, N = 33, K = 29, lda = 80;
  auto At = random_floats(size_t(K * lda), 5), B = random_floats(size_t(K * N), 6);
  std::vector<float> C(M * N);
  tile::gemm(false, Tri::None, 0, M, N, K, At.data(), 1, lda, B.data(), N, C.data(), N);
  for (int64_t r = 0; r < M; ++r)
    for (int64_t n = 0; n < N; ++n) {
      double ref = 0;
      for (int64_t k = 0; k < K; ++k) ref += double(At[k * lda + r]) * B[k * N + n];
      ASSERT_NEAR(C[r * N + n], ref, 1e-5 * (1.0 + std::abs(ref)));
    }
}

TEST(AttentionTile, PackTransposesScalesAndPads) {
  for (int64_t HS : {4, 17, 64, 80})
    for (int64_t ni : {1, 17, 64}) {
      const int64_t ld = HS + 9, Nq = (ni + 15) / 16 * 16, ldt = Nq + 16;
      auto X = random_floats(size_t(ni * ld), 7);
      std::vector<float> XT(HS * ldt, 42.f), rows(ni * HS, 42.f);
      tile::pack_t(XT.data(), ldt, X.data(), ld, ni, Nq, HS, 0.5f);
      tile::pack_rows(rows.data(), X.data(), ld, ni, HS);
      for (int64_t d = 0; d < HS; ++d)
        for (int64_t ii = 0; ii < ldt; ++ii) {
          const float want = ii < ni ? X[ii * ld + d] * 0.5f : ii < Nq ? 0.f : 42.f;
          ASSERT_EQ(XT[d * ldt + ii], want) << "HS=" << HS << " ni=" << ni << " d=" << d << " ii=" << ii;
        }
      for (int64_t r = 0; r < ni; ++r)
        for (int64_t d = 0; d < HS; ++d) ASSERT_EQ(rows[r * HS + d], X[r * ld + d]);
    }
}
