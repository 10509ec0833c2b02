// Row-major single-precision GEMM, the one place the engine calls into oneDNN.
//
// Threading: oneDNN 2.6 here uses the OpenMP runtime. From serial code sgemm uses all OpenMP threads;
// from inside an `omp parallel` region it runs single-threaded on the calling thread (oneDNN checks
// omp_in_parallel(); it spawns no nested team even with OMP_MAX_ACTIVE_LEVELS > 1), so per-thread GEMMs
// are safe.
//
// Determinism: bit-identical run to run for fixed shapes and thread count. On the GPT shapes we also
// observed identical bits for 1 vs 2 threads, inside vs outside a parallel region, for misaligned
// pointers and for a row sub-range of A -- but oneDNN does not promise this (its blocking may split K
// across threads on other machines or versions), so a recompute should call sgemm with the same
// shapes, from the same kind of context, as the forward it replays.
#pragma once
#include <cstdint>

namespace remat::kernels {

// C(MxN) = alpha * op(A) * op(B) + beta * C, all row-major. op(A) is MxK, op(B) is KxN.
// transA: A is stored KxM (lda >= M) instead of MxK (lda >= K); likewise transB for B.
// beta == 0 means C is write-only (NaNs in C are not propagated).
void sgemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

}  // namespace remat::kernels
