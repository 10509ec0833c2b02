#include "kernels/dot_bf16.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>

#include "kernels/bf16.h"

namespace remat::kernels {

namespace dot_bf16_path {

namespace {

constexpr float kMinNormal = 1.17549435e-38f;
inline float flush(float x) { return std::fabs(x) < kMinNormal ? std::copysign(0.0f, x) : x; }
inline float lo(uint32_t w) { return flush(std::bit_cast<float>(w << 16)); }
inline float hi(uint32_t w) { return flush(std::bit_cast<float>(w & 0xFFFF0000u)); }

#define REMAT_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

// MR rows x NV vectors of 16 columns (up to 6 x 4: 24 accumulators, as attention_tile's fp32 kernel),
// the last vector's columns masked by `last`. Fully unrolled (as attention_tile.cpp's micro) so the
// accumulators stay in registers.
template <int MR, int NV, bool ACC>
REMAT_BF16_TARGET void block(int64_t KP, const bf16x2* A, int64_t sa_r, int64_t sa_k, const bf16x2* B, int64_t ldb,
                             float* C, int64_t ldc, __mmask16 last) {
  __m512 c[MR][NV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      if constexpr (ACC)
        c[r][v] = v == NV - 1 ? _mm512_maskz_loadu_ps(last, C + r * ldc + 16 * v) : _mm512_loadu_ps(C + r * ldc + 16 * v);
      else
        c[r][v] = _mm512_setzero_ps();
    }
  for (int64_t kp = 0; kp < KP; ++kp) {
    __m512i b[NV];
    const bf16x2* bk = B + kp * ldb;
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v)
      b[v] = v == NV - 1 ? _mm512_maskz_loadu_epi32(last, bk + 16 * v) : _mm512_loadu_si512(bk + 16 * v);
    const bf16x2* ak = A + kp * sa_k;
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const __m512bh a = (__m512bh)_mm512_set1_epi32(int(ak[r * sa_r]));
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) c[r][v] = _mm512_dpbf16_ps(c[r][v], a, (__m512bh)b[v]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      if (v == NV - 1)
        _mm512_mask_storeu_ps(C + r * ldc + 16 * v, last, c[r][v]);
      else
        _mm512_storeu_ps(C + r * ldc + 16 * v, c[r][v]);
    }
}

using BlockFn = void (*)(int64_t, const bf16x2*, int64_t, int64_t, const bf16x2*, int64_t, float*, int64_t, __mmask16);
constexpr int kMR = 6;
#define REMAT_ROW(MR, ACC) {block<MR, 1, ACC>, block<MR, 2, ACC>, block<MR, 3, ACC>, block<MR, 4, ACC>}
#define REMAT_TABLE(ACC) \
  {REMAT_ROW(1, ACC), REMAT_ROW(2, ACC), REMAT_ROW(3, ACC), REMAT_ROW(4, ACC), REMAT_ROW(5, ACC), REMAT_ROW(6, ACC)}
constexpr BlockFn kBlocks[2][kMR][4] = {REMAT_TABLE(false), REMAT_TABLE(true)};
#undef REMAT_TABLE
#undef REMAT_ROW

inline __mmask16 mask_of(int64_t n) { return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1); }  // n >= 0

}  // namespace

void gemm_portable(bool acc, int64_t M, int64_t N, int64_t KP, const bf16x2* A, int64_t sa_r, int64_t sa_k,
                   const bf16x2* B, int64_t ldb, float* C, int64_t ldc) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      float c = acc ? C[m * ldc + n] : 0.0f;
      if (KP > 0) c = flush(c);  // vdpbf16ps reads its accumulator as zero when denormal
      for (int64_t kp = 0; kp < KP; ++kp) {
        const uint32_t a = A[m * sa_r + kp * sa_k], b = B[kp * ldb + n];
        c = flush(std::fma(hi(a), hi(b), c));
        c = flush(std::fma(lo(a), lo(b), c));
      }
      C[m * ldc + n] = c;
    }
}

REMAT_BF16_TARGET void gemm_avx512(bool acc, int64_t M, int64_t N, int64_t KP, const bf16x2* A, int64_t sa_r,
                                   int64_t sa_k, const bf16x2* B, int64_t ldb, float* C, int64_t ldc) {
  for (int64_t n0 = 0; n0 < N; n0 += 64) {
    const int64_t nn = std::min<int64_t>(64, N - n0), nv = (nn + 15) / 16;
    const __mmask16 last = mask_of(nn - 16 * (nv - 1));
    for (int64_t m0 = 0; m0 < M; m0 += kMR) {
      const int64_t mr = std::min<int64_t>(kMR, M - m0);
      kBlocks[acc][mr - 1][nv - 1](KP, A + m0 * sa_r, sa_r, sa_k, B + n0, ldb, C + m0 * ldc + n0, ldc, last);
    }
  }
}

}  // namespace dot_bf16_path

void dot_bf16_gemm(bool acc, int64_t M, int64_t N, int64_t KP, const bf16x2* A, int64_t sa_r, int64_t sa_k,
                   const bf16x2* B, int64_t ldb, float* C, int64_t ldc) {
  if (bf16_isa() == Bf16Isa::Avx512Bf16)
    dot_bf16_path::gemm_avx512(acc, M, N, KP, A, sa_r, sa_k, B, ldb, C, ldc);
  else
    dot_bf16_path::gemm_portable(acc, M, N, KP, A, sa_r, sa_k, B, ldb, C, ldc);
}

}  // namespace remat::kernels
