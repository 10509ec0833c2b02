// Operand packing shared by the bf16 attention kernels (attention_bf16.cpp, flash_attention_bf16.cpp)
// for the pair kernels of dot_bf16.h: operands become 32-bit words of two bf16, in one of four
// shapes:
//   pairs_rows: dst[r*ld + kp]  = (X[r][2kp], X[r][2kp+1])   an A operand, reduction along X's rows
//   pairs_t:    dst[kp*ld + r]  = (X[r][2kp], X[r][2kp+1])   a B operand, reduction along X's rows
//   vnni:       dst[rp*ld + c]  = (X[2rp][c], X[2rp+1][c])   a B operand (or A with sa_r = 1),
//                                                             reduction down X's columns
//   vnni_t:     dst[c*ld + rp]  = (X[2rp][c], X[2rp+1][c])   an A operand with rows contiguous
//                                                             (dot_bf16_gemm_rows), reduction down X's columns
// with zeros wherever X has no element, so padding adds 0 * 0. Also the transposed add of the
// backward's fp32 dK^T, dV^T into bf16 rows, the softmax rows' horizontal max and sum, and the
// dropout helpers both kernels use, so they drop the same elements the same way.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/bf16.h"
#include "kernels/dot_bf16.h"

namespace remat::kernels::pack_bf16 {

inline uint32_t pair(bf16 lo, bf16 hi) { return uint32_t(lo.bits) | (uint32_t(hi.bits) << 16); }

// X is bf16 with row stride ldx, rows x cols valid. The loops are branch-free over whole words so the
// compiler vectorises them; an odd last column is paired with a zero.
inline uint32_t word_at(const bf16* x) {  // (x[0], x[1]) as one word, any alignment
  uint32_t w;
  std::memcpy(&w, x, 4);
  return w;
}
inline void pack_pairs_rows(bf16x2* dst, int64_t ld, const bf16* X, int64_t ldx, int64_t rows, int64_t cols,
                            int64_t rows_pad) {
  const int64_t cw = (cols + 1) / 2, full = cols / 2;
  for (int64_t r = 0; r < rows_pad; ++r) {
    bf16x2* d = dst + r * ld;
    if (r >= rows) {
      std::fill(d, d + cw, 0u);
      continue;
    }
    std::memcpy(d, X + r * ldx, full * 4);
    if (full < cw) d[full] = pair(X[r * ldx + cols - 1], bf16{0});
  }
}
#ifdef __AVX512F__
// dst[c*ldd + r] = word c of source row r, for a 16 x 16 block of words: rows `src_row_bytes` apart
// (any alignment), ldd in words.
inline void transpose16(bf16x2* dst, int64_t ldd, const void* src, int64_t src_row_bytes) {
  const char* s = static_cast<const char*>(src);
  __m512i a[16], b[16];
  for (int r = 0; r < 16; ++r) a[r] = _mm512_loadu_si512(s + r * src_row_bytes);
  for (int k = 0; k < 8; ++k) {  // in each 128-bit lane: (r0 c0, r1 c0, r0 c1, r1 c1) / (.. c2 .. c3)
    b[2 * k] = _mm512_maskz_unpacklo_epi32(0xFFFF, a[2 * k], a[2 * k + 1]);
    b[2 * k + 1] = _mm512_maskz_unpackhi_epi32(0xFFFF, a[2 * k], a[2 * k + 1]);
  }
  for (int k = 0; k < 4; ++k) {  // a[4k + c], lane L: rows 4k..4k+3 of column 4L + c
    a[4 * k] = _mm512_maskz_unpacklo_epi64(0xFF, b[4 * k], b[4 * k + 2]);
    a[4 * k + 1] = _mm512_maskz_unpackhi_epi64(0xFF, b[4 * k], b[4 * k + 2]);
    a[4 * k + 2] = _mm512_maskz_unpacklo_epi64(0xFF, b[4 * k + 1], b[4 * k + 3]);
    a[4 * k + 3] = _mm512_maskz_unpackhi_epi64(0xFF, b[4 * k + 1], b[4 * k + 3]);
  }
  for (int c = 0; c < 4; ++c) {  // column 4L + c: lane L of a[c], a[4 + c], a[8 + c], a[12 + c]
    auto shuf = [](__m512i x, __m512i y, auto imm) { return _mm512_maskz_shuffle_i32x4(0xFFFF, x, y, imm()); };
    using I44 = std::integral_constant<int, 0x44>;
    using IEE = std::integral_constant<int, 0xEE>;
    using I88 = std::integral_constant<int, 0x88>;
    using IDD = std::integral_constant<int, 0xDD>;
    const __m512i e0 = shuf(a[c], a[4 + c], I44{}), e1 = shuf(a[c], a[4 + c], IEE{});
    const __m512i f0 = shuf(a[8 + c], a[12 + c], I44{}), f1 = shuf(a[8 + c], a[12 + c], IEE{});
    _mm512_storeu_si512(dst + c * ldd, shuf(e0, f0, I88{}));
    _mm512_storeu_si512(dst + (4 + c) * ldd, shuf(e0, f0, IDD{}));
    _mm512_storeu_si512(dst + (8 + c) * ldd, shuf(e1, f1, I88{}));
    _mm512_storeu_si512(dst + (12 + c) * ldd, shuf(e1, f1, IDD{}));
  }
}
#endif

inline void pack_pairs_t(bf16x2* dst, int64_t ld, const bf16* X, int64_t ldx, int64_t rows, int64_t cols,
                         int64_t rows_pad) {
  // 16 rows at a time, each destination row written 16 words at once (whole 16 x 16 blocks by an
  // AVX-512 transpose): a row-by-row transpose would store at a stride of ld words, which for ld a
  // power of two maps every store to a few L1 sets.
  const int64_t cw = (cols + 1) / 2, full = cols / 2;
  for (int64_t r0 = 0; r0 < rows_pad; r0 += 16) {
    const int64_t nr = std::min<int64_t>(16, rows_pad - r0), nv = std::clamp<int64_t>(rows - r0, 0, nr);
    int64_t kp = 0;
#ifdef __AVX512F__
    if (nv == 16)
      for (; kp + 16 <= full; kp += 16) transpose16(dst + kp * ld + r0, ld, X + r0 * ldx + 2 * kp, ldx * 2);
#endif
    for (; kp < cw; ++kp) {
      bf16x2* d = dst + kp * ld + r0;
      if (kp < full)
        for (int64_t r = 0; r < nv; ++r) d[r] = word_at(X + (r0 + r) * ldx + 2 * kp);
      else
        for (int64_t r = 0; r < nv; ++r) d[r] = pair(X[(r0 + r) * ldx + cols - 1], bf16{0});
      for (int64_t r = nv; r < nr; ++r) d[r] = 0;
    }
  }
}
inline void pack_vnni(bf16x2* dst, int64_t ld, const bf16* X, int64_t ldx, int64_t rows, int64_t cols,
                      int64_t rows_pad, int64_t cols_pad) {
  for (int64_t rp = 0; rp < (rows_pad + 1) / 2; ++rp) {
    bf16x2* d = dst + rp * ld;
    const int64_t r0 = 2 * rp, r1 = r0 + 1;
    if (r1 < rows) {
      const bf16* x0 = X + r0 * ldx;
      const bf16* x1 = X + r1 * ldx;
      for (int64_t c = 0; c < cols; ++c) d[c] = pair(x0[c], x1[c]);
    } else if (r0 < rows) {
      const bf16* x0 = X + r0 * ldx;
      for (int64_t c = 0; c < cols; ++c) d[c] = x0[c].bits;
    } else {
      std::fill(d, d + cols, 0u);
    }
    std::fill(d + cols, d + cols_pad, 0u);
  }
}
inline void pack_vnni_t(bf16x2* dst, int64_t ld, const bf16* X, int64_t ldx, int64_t rows, int64_t cols,
                        int64_t rows_pad) {
  for (int64_t rp = 0; rp < (rows_pad + 1) / 2; ++rp) {
    const bf16* x0 = X + 2 * rp * ldx;
    if (2 * rp + 1 < rows)
      for (int64_t c = 0; c < cols; ++c) dst[c * ld + rp] = pair(x0[c], x0[ldx + c]);
    else if (2 * rp < rows)
      for (int64_t c = 0; c < cols; ++c) dst[c * ld + rp] = x0[c].bits;
    else
      for (int64_t c = 0; c < cols; ++c) dst[c * ld + rp] = 0;
  }
}

// dst[r*ldd + c] = bf16(dst[r*ldd + c] + acc[c*lda + r]), r < rows, c < cols: a transposed fp32
// accumulator (dK^T, dV^T) added to bf16 rows, rounded once. Read in 16 x 16 blocks: a column of acc
// at a power-of-two stride would map every load to a few L1 sets.
inline void add_transposed(bf16* dst, int64_t ldd, const float* acc, int64_t lda, int64_t rows, int64_t cols) {
  constexpr int64_t kW = 256;              // columns per pass
  alignas(64) float blk[16 * kW], t[kW];  // blk[r*kW + c] = acc[(c0 + c)*lda + r0 + r]
  for (int64_t r0 = 0; r0 < rows; r0 += 16) {
    const int64_t nr = std::min<int64_t>(16, rows - r0);
    for (int64_t w0 = 0; w0 < cols; w0 += kW) {
      const int64_t nw = std::min(kW, cols - w0);
      for (int64_t c0 = 0; c0 < nw; c0 += 16) {
        const int64_t nc = std::min<int64_t>(16, nw - c0);
        const float* a = acc + (w0 + c0) * lda + r0;
#ifdef __AVX512F__
        if (nr == 16 && nc == 16) {
          transpose16(reinterpret_cast<bf16x2*>(blk + c0), kW, a, lda * 4);
          continue;
        }
#endif
        for (int64_t c = 0; c < nc; ++c)
          for (int64_t r = 0; r < nr; ++r) blk[r * kW + c0 + c] = a[c * lda + r];
      }
      for (int64_t r = 0; r < nr; ++r) {
        bf16* d = dst + (r0 + r) * ldd + w0;
        for (int64_t c = 0; c < nw; ++c) t[c] = bf16_to_float(d[c]) + blk[r * kW + c];
        to_bf16(d, t, nw);
      }
    }
  }
}

// Horizontal max and sum of 16 lanes for the softmax rows of both kernels: one fixed tree each
// (halves, then quarters, ...), so a row's result depends on nothing but its values.
typedef float v16f_ __attribute__((vector_size(64)));
typedef float v8f_ __attribute__((vector_size(32)));
typedef float v4f_ __attribute__((vector_size(16)));
inline float hmax16(v16f_ v) {
  const v8f_ a = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7),
             b = __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15), h8 = a > b ? a : b;
  const v4f_ c = __builtin_shufflevector(h8, h8, 0, 1, 2, 3), d = __builtin_shufflevector(h8, h8, 4, 5, 6, 7),
             h4 = c > d ? c : d;
  const float m0 = h4[0] > h4[2] ? h4[0] : h4[2], m1 = h4[1] > h4[3] ? h4[1] : h4[3];
  return m0 > m1 ? m0 : m1;
}
inline float hsum16(v16f_ v) {
  const v8f_ h8 = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
                  __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
  const v4f_ h4 = __builtin_shufflevector(h8, h8, 0, 1, 2, 3) + __builtin_shufflevector(h8, h8, 4, 5, 6, 7);
  return (h4[0] + h4[2]) + (h4[1] + h4[3]);
}

inline bool kept(const uint64_t* w, int64_t j) { return (w[j >> 6] >> (j & 63)) & 1; }

// Dropped probability: P * keep / (1-p), rounded to bf16; P itself when p = 0. The one formula the
// forward (P V) and the backward (dV) share.
inline bf16 dropped(bf16 P, bool keep, float p, float inv_keep) {
  if (p == 0.0f) return P;
  return keep ? float_to_bf16(bf16_to_float(P) * inv_keep) : bf16{0};
}

// The same from an fp32 probability (the flash kernels, which never store P): rounded once.
inline bf16 dropped(float P, bool keep, float p, float inv_keep) {
  if (p == 0.0f) return float_to_bf16(P);
  return keep ? float_to_bf16(P * inv_keep) : bf16{0};
}

}  // namespace remat::kernels::pack_bf16
