#include "kernels/gemm.h"

#include <oneapi/dnnl/dnnl.h>

#include "core/error.h"

namespace remat::kernels {

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
  dnnl_status_t st = dnnl_sgemm(transA ? 'T' : 'N', transB ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  REMAT_ASSERT(st == dnnl_success, "sgemm: dnnl_sgemm failed");
}

}  // namespace remat::kernels
