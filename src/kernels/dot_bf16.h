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
//
// dot_bf16_gemm_rows below is the same product for A with contiguous rows, on Intel AMX tiles where
// the CPU has AMX-BF16 (several times this kernel's rate: BM_dot_bf16 in bench_attention.cpp); the
// attention kernels call that one.
#pragma once
#include <cstdint>

namespace remat::kernels {

typedef uint32_t __attribute__((may_alias)) bf16x2;  // two bf16, read from any buffer

void dot_bf16_gemm(bool acc, int64_t M, int64_t N, int64_t KP, const bf16x2* A, int64_t sa_r, int64_t sa_k,
                   const bf16x2* B, int64_t ldb, float* C, int64_t ldc);

// The same product with A's pairs contiguous along each row (sa_k = 1, row stride lda), on AMX tiles
// (tdpbf16ps, 16 x 16 outputs of 16 pairs each) where the CPU has AMX-BF16, the OS grants the tile
// state and bf16_isa() is Avx512Bf16; otherwise it is dot_bf16_gemm, bits included.
//
// AMX rounds its sums differently from vdpbf16ps (measured: about a third of random results differ
// in the last fp32 bits), so the AMX path does not reproduce the other two bit for bit: it agrees
// with them to fp32 rounding. On a given path results are bit-identical run to run, and do not depend
// on M, N or how the caller blocks rows and columns: each element is summed over the chunks of 16
// pairs kp = 0..15, 16..31, ... in increasing order, a chunk running past KP padded with zero pairs
// (which adds nothing: only elements in [0, KP) are ever read). The caller's buffers are read only
// within M x KP (A) and KP x N (B), and C is touched only within M x N.
void dot_bf16_gemm_rows(bool acc, int64_t M, int64_t N, int64_t KP, const bf16x2* A, int64_t lda, const bf16x2* B,
                        int64_t ldb, float* C, int64_t ldc);

// "amx_bf16", "avx512_bf16" or "portable": the path dot_bf16_gemm_rows takes now.
const char* dot_bf16_rows_path();

// Allows (default) or forbids the AMX path, returning the previous setting; forbidden, the rows
// product is dot_bf16_gemm's. For tests and benchmarks (the vdpbf16ps path on an AMX machine). Not
// thread-safe against kernels running concurrently: call between kernels.
bool set_dot_bf16_amx(bool allowed);

namespace dot_bf16_path {
void gemm_portable(bool acc, int64_t M, int64_t N, int64_t KP, const bf16x2* A, int64_t sa_r, int64_t sa_k,
                   const bf16x2* B, int64_t ldb, float* C, int64_t ldc);
// Only when bf16_cpu_isa() is Bf16Isa::Avx512Bf16.
void gemm_avx512(bool acc, int64_t M, int64_t N, int64_t KP, const bf16x2* A, int64_t sa_r, int64_t sa_k,
                 const bf16x2* B, int64_t ldb, float* C, int64_t ldc);
// Whether the CPU has AMX-BF16 and the OS granted this process the tile state (asked once).
bool amx_available();
// Only when amx_available().
void gemm_amx(bool acc, int64_t M, int64_t N, int64_t KP, const bf16x2* A, int64_t lda, const bf16x2* B, int64_t ldb,
              float* C, int64_t ldc);
}  // namespace dot_bf16_path

}  // namespace remat::kernels
