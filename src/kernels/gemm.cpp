#include "kernels/gemm.h"

#include <omp.h>

#include <algorithm>
#include <oneapi/dnnl/dnnl.h>

#include "core/error.h"

namespace remat::kernels {

namespace {

// One tile, always single-threaded: sgemm calls it only inside a parallel region (oneDNN then runs on
// the calling thread) or where one thread is all there is.
void tile(bool transA, bool transB, int64_t i0, int64_t m, int64_t j0, int64_t n, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  sgemm_onednn(transA, transB, m, n, K, alpha, transA ? A + i0 : A + i0 * lda, lda, transB ? B + j0 * ldb : B + j0, ldb,
               beta, C + i0 * ldc + j0, ldc);
}

}  // namespace

void sgemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  REMAT_ASSERT(M >= 0 && N >= 0 && K >= 0, "sgemm: negative dimension");
  if (M == 0 || N == 0) return;
  if (K == 0) {
    // Nothing to multiply: C = beta * C. Handled here so we never hand oneDNN a degenerate shape.
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  REMAT_ASSERT(lda >= (transA ? M : K) && ldb >= (transB ? K : N) && ldc >= N, "sgemm: leading dimension too small");
  // Rows of C in tiles of kSgemmTile; a C of fewer rows than two tiles (a weight's gradient, M = C_in),
  // in tiles of kSgemmTile columns instead. Either way a function of the shape alone.
  const bool by_rows = M >= 2 * kSgemmTile;
  const int64_t tiles = ((by_rows ? M : N) + kSgemmTile - 1) / kSgemmTile;
  auto run = [&](int64_t t) {
    const int64_t at = t * kSgemmTile;
    if (by_rows) {
      tile(transA, transB, at, std::min(kSgemmTile, M - at), 0, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    } else {
      tile(transA, transB, 0, M, at, std::min(kSgemmTile, N - at), K, alpha, A, lda, B, ldb, beta, C, ldc);
    }
  };
  if (omp_in_parallel()) {
    for (int64_t t = 0; t < tiles; ++t) run(t);
    return;
  }
  // A parallel region even for one tile: called outside one, oneDNN would thread the call itself. In a
  // team of one (one thread, or a team shrunk to one) it sees one thread all the same.
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t t = 0; t < tiles; ++t) run(t);
}

void sgemm_onednn(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                  const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const dnnl_status_t st = dnnl_sgemm(transA ? 'T' : 'N', transB ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  REMAT_ASSERT(st == dnnl_success, "sgemm: dnnl_sgemm failed");
}

}  // namespace remat::kernels
