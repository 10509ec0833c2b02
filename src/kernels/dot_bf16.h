// The bf16 dot-product micro-kernel of the bf16 attention kernels: a small GEMM on bf16 pairs with
// fp32 accumulation, on AVX512_BF16's vdpbf16ps where the CPU has it, otherwise on a portable loop
// that computes the very same bits.
//
// Operands are 32-bit words, each holding two bf16 values along the reduction dimension (element
// 2k in the low half, 2k+1 in the high half, as a bf16 array read as words). For m < M, n < N:
//   C[m*ldc + n] = (acc ? C[m*ldc + n] : 0) + sum over kp < KP of dot2(A(m, kp), B[kp*ldb + n])
// with A(m, kp) = A[m*sa_r + kp*sa_k]. Each element is summed in increasing kp, each pair as
// vdpbf16ps does it: c = fma(a_hi, b_hi, c), then c = fma(a_lo, b_lo, c), with denormal inputs read
// as zero and denormal results flushed to zero (measured on hardware: 3.2 M random cases, tiny and
// denormal ones included, all equal to this emulation). So both paths give identical bits, and a
// result does not depend on how rows or columns are blocked.
#pragma once
#include <cstdint>

namespace remat::kernels {

typedef uint32_t __attribute__((may_alias)) bf16x2;  // two bf16, read from any buffer

void dot_bf16_gemm(bool acc, int64_t M, int64_t N, int64_t KP, const bf16x2* A, int64_t sa_r, int64_t sa_k,
                   const bf16x2* B, int64_t ldb, float* C, int64_t ldc);

namespace dot_bf16_path {
void gemm_portable(bool acc, int64_t M, int64_t N, int64_t KP, const bf16x2* A, int64_t sa_r, int64_t sa_k,
                   const bf16x2* B, int64_t ldb, float* C, int64_t ldc);
// Only when bf16_cpu_isa() is Bf16Isa::Avx512Bf16.
void gemm_avx512(bool acc, int64_t M, int64_t N, int64_t KP, const bf16x2* A, int64_t sa_r, int64_t sa_k,
                 const bf16x2* B, int64_t ldb, float* C, int64_t ldc);
}  // namespace dot_bf16_path

}  // namespace remat::kernels
