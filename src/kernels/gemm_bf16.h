// Row-major bf16 GEMM with fp32 accumulation through oneDNN's matmul primitive (oneDNN runs it on AMX
// or AVX512_BF16 where the CPU has them; `ONEDNN_VERBOSE=1` prints which). On a CPU without AVX-512
// (AVX2: oneDNN 2.6 has no bf16 matmul there) the operands are widened exactly to fp32 in scratch
// ("gemm_bf16.scratchpad" too, counted in dry runs alike) and multiplied by sgemm: another path,
// with its own bits, as deterministic. The bf16 twin of gemm.h's sgemm.
//
// C(MxN) = op(A) * op(B) [+ bias] + beta * C, A and B bf16, products summed in fp32; C fp32, or bf16
// (rounded once, after the bias and the beta term, which is read from the bf16 C and added in fp32).
// op and leading dimensions as in sgemm: transA means A is stored KxM (lda >= M), transB that B is
// stored NxK (ldb >= K). bias (N floats, may be null) is added to every row. beta == 0 means C is
// write-only; beta == 1 accumulates (weight gradients: dW += inp^T @ dout, in fp32).
//
// Primitives are created once per (shape, transposes, leading dimensions, C dtype, beta, bias,
// OpenMP thread count, inside-a-parallel-region) and cached for the life of the process (a training
// run uses a handful of shapes). oneDNN's scratchpad comes from the accounting allocator (Workspace,
// "gemm_bf16.scratchpad") for the length of each call. Under a ShapeOnlyScope (a dry run, core/tensor.h)
// the call multiplies nothing and touches no operand: it only counts that scratchpad in accountant().
//
// Threading as sgemm: from serial code the primitive uses all OpenMP threads; from inside a parallel
// region it runs on the calling thread. Determinism: bit-identical run to run for fixed shapes and
// thread count (tests/kernels/test_gemm_bf16.cpp); not promised across thread counts.
#pragma once
#include <cstdint>

#include "kernels/bf16.h"

namespace remat::kernels {

void gemm_bf16(bool transA, bool transB, int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda, const bf16* B,
               int64_t ldb, float beta, float* C, int64_t ldc, const float* bias = nullptr);
void gemm_bf16(bool transA, bool transB, int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda, const bf16* B,
               int64_t ldb, float beta, bf16* C, int64_t ldc, const float* bias = nullptr);

// What oneDNN runs for this product, e.g. "brg:avx512_core_amx" (its implementation name), or
// "widen+sgemm" without a bf16 matmul; for `remat bench` to say which path ran.
const char* gemm_bf16_impl(bool transA, bool transB, int64_t M, int64_t N, int64_t K, bool bf16_out);

// Primitives cached so far (tests).
int64_t gemm_bf16_cached_primitives();

}  // namespace remat::kernels
