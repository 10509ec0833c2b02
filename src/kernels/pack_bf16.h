// Operand packing shared by the bf16 attention kernels (attention_bf16.cpp, flash_attention_bf16.cpp)
// for the pair micro-kernel of dot_bf16.h: operands become 32-bit words of two bf16, in one of three
// shapes:
//   pairs_rows: dst[r*ld + kp]  = (X[r][2kp], X[r][2kp+1])   an A operand, reduction along X's rows
//   pairs_t:    dst[kp*ld + r]  = (X[r][2kp], X[r][2kp+1])   a B operand, reduction along X's rows
//   vnni:       dst[rp*ld + c]  = (X[2rp][c], X[2rp+1][c])   a B operand (or A with sa_r = 1),
//                                                             reduction down X's columns
// with zeros wherever X has no element, so padding adds 0 * 0. Also the dropout helpers both kernels
// use, so they drop the same elements the same way.
#pragma once
#include <algorithm>
#include <cstdint>

#include "kernels/bf16.h"
#include "kernels/dot_bf16.h"

namespace remat::kernels::pack_bf16 {

inline uint32_t pair(bf16 lo, bf16 hi) { return uint32_t(lo.bits) | (uint32_t(hi.bits) << 16); }

// X is bf16 with row stride ldx, rows x cols valid.
inline void pack_pairs_rows(bf16x2* dst, int64_t ld, const bf16* X, int64_t ldx, int64_t rows, int64_t cols,
                            int64_t rows_pad) {
  const int64_t cw = (cols + 1) / 2;
  for (int64_t r = 0; r < rows_pad; ++r)
    for (int64_t kp = 0; kp < cw; ++kp) {
      if (r >= rows) {
        dst[r * ld + kp] = 0;
        continue;
      }
      const bf16* x = X + r * ldx + 2 * kp;
      dst[r * ld + kp] = pair(x[0], 2 * kp + 1 < cols ? x[1] : bf16{0});
    }
}
inline void pack_pairs_t(bf16x2* dst, int64_t ld, const bf16* X, int64_t ldx, int64_t rows, int64_t cols,
                         int64_t rows_pad) {
  const int64_t cw = (cols + 1) / 2;
  for (int64_t r = 0; r < rows_pad; ++r)
    for (int64_t kp = 0; kp < cw; ++kp) {
      if (r >= rows) {
        dst[kp * ld + r] = 0;
        continue;
      }
      const bf16* x = X + r * ldx + 2 * kp;
      dst[kp * ld + r] = pair(x[0], 2 * kp + 1 < cols ? x[1] : bf16{0});
    }
}
inline void pack_vnni(bf16x2* dst, int64_t ld, const bf16* X, int64_t ldx, int64_t rows, int64_t cols,
                      int64_t rows_pad, int64_t cols_pad) {
  for (int64_t rp = 0; rp < (rows_pad + 1) / 2; ++rp)
    for (int64_t c = 0; c < cols_pad; ++c) {
      const bf16 lo = (2 * rp < rows && c < cols) ? X[2 * rp * ldx + c] : bf16{0};
      const bf16 hi = (2 * rp + 1 < rows && c < cols) ? X[(2 * rp + 1) * ldx + c] : bf16{0};
      dst[rp * ld + c] = pair(lo, hi);
    }
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
