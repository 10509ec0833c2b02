// Row-major single-precision GEMM, the one place the engine calls into oneDNN.
//
// Determinism: the same bits for any thread count, inside or outside a parallel region. oneDNN does not
// promise that: on AVX2 its sgemm gave other bits with 1 and 2 threads (it splits K across threads for
// some shapes), so a run whose team shrinks and grows (core/threads.h) changed its weights. So C is cut
// into tiles of a fixed size (kSgemmTile rows or columns, a function of the shape, never of the thread
// count), each computed by one single-threaded oneDNN call over all of K: a value's sum is always that
// tile's, whichever thread runs it. Outside a parallel region the tiles are shared among the threads; inside one
// (oneDNN then runs single-threaded on the calling thread, without a nested team) they run in turn.
#pragma once
#include <cstdint>

namespace remat::kernels {

// C(MxN) = alpha * op(A) * op(B) + beta * C, all row-major. op(A) is MxK, op(B) is KxN.
// transA: A is stored KxM (lda >= M) instead of MxK (lda >= K); likewise transB for B.
// beta == 0 means C is write-only (NaNs in C are not propagated).
void sgemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// The tile: 512 rows of C over all of N, or where C has fewer than 1,024 rows (a weight's gradient),
// 512 columns over all of M. On a 2-core AVX2 EPYC these ran at oneDNN's own speed (bench_kernels:
// BM_sgemm against BM_sgemm_onednn; remat bench's step times within the noise), while 128- and
// 256-row tiles lost up to half of it to packing.
inline constexpr int64_t kSgemmTile = 512;

// One dnnl_sgemm call on all of C, threaded as oneDNN chooses: not thread-count invariant. For the
// benchmark that weighs the tiling.
void sgemm_onednn(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                  const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

}  // namespace remat::kernels
