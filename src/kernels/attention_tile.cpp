// Shared attention building blocks. See attention_tile.h.
//
// tile::gemm runs on one AVX-512 register-blocked micro-kernel (gemm_bc, 6 rows x 64 columns of
// accumulators for N = 64) that computes C = A B with A read at arbitrary (row, k) strides, so A^T
// operands cost nothing; B is read row by row and should be contiguous (rows at the qkv stride of
// 3C floats, often a multiple of 4 KiB, alias in L1 and cost ~20%). On diagonal tiles gemm_tri skips,
// per 16 rows, the part that only multiplies masked zeros.
#include "kernels/attention_tile.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/philox.h"
#include "kernels/simd.h"

namespace remat::kernels {

using tile::Tri;

namespace {

#ifdef __AVX512F__

// Register-blocked micro-kernel: C[r][n] (+)= sum_k A[r*sa_r + k*sa_k] * B[k*ldb + n] for r < R,
// n < 16*NV (last vector masked by `last`).
// With ACC and rs != nullptr, C row r is first multiplied by rs[r].
template <int R, int NV, bool ACC>
inline void micro(int64_t K, const float* A, int64_t sa_r, int64_t sa_k, const float* B, int64_t ldb,
                  float* C, int64_t ldc, __mmask16 last, const float* rs) {
  __m512 acc[R][NV];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      if constexpr (ACC)
        acc[r][v] = v == NV - 1 ? _mm512_maskz_loadu_ps(last, C + r * ldc + 16 * v) : _mm512_loadu_ps(C + r * ldc + 16 * v);
      else
        acc[r][v] = _mm512_setzero_ps();
    }
  if (ACC && rs) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 sc = _mm512_set1_ps(rs[r]);
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_mul_ps(acc[r][v], sc);
    }
  }
  for (int64_t k = 0; k < K; ++k) {
    __m512 b[NV];
    const float* bk = B + k * ldb;
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) b[v] = v == NV - 1 ? _mm512_maskz_loadu_ps(last, bk + 16 * v) : _mm512_loadu_ps(bk + 16 * v);
    const float* ak = A + k * sa_k;
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 a = _mm512_set1_ps(ak[r * sa_r]);
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(a, b[v], acc[r][v]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      if (v == NV - 1)
        _mm512_mask_storeu_ps(C + r * ldc + 16 * v, last, acc[r][v]);
      else
        _mm512_storeu_ps(C + r * ldc + 16 * v, acc[r][v]);
    }
}

template <int NV>
constexpr int rows_for() {
  return NV <= 2 ? 8 : NV == 3 ? 7 : NV == 4 ? 6 : NV == 5 ? 4 : NV == 6 ? 4 : 3;
}

template <int NV, bool ACC, int R>
inline void micro_rows(int rem, int64_t K, const float* A, int64_t sa_r, int64_t sa_k, const float* B,
                       int64_t ldb, float* C, int64_t ldc, __mmask16 last, const float* rs) {
  if constexpr (R >= 1) {
    if (rem == R)
      micro<R, NV, ACC>(K, A, sa_r, sa_k, B, ldb, C, ldc, last, rs);
    else
      micro_rows<NV, ACC, R - 1>(rem, K, A, sa_r, sa_k, B, ldb, C, ldc, last, rs);
  }
}

template <int NV, bool ACC>
void gemm_nv(int64_t M, int64_t K, const float* A, int64_t sa_r, int64_t sa_k, const float* B, int64_t ldb,
             float* C, int64_t ldc, __mmask16 last, const float* rs) {
  constexpr int R = rows_for<NV>();
  int64_t r = 0;
  for (; r + R <= M; r += R) {
    // Accumulating: C often lives in dqkv at a large row stride, outside L1; fetch the next block's
    // rows while this block runs, so its first loads do not stall.
    if (ACC)
      for (int64_t q = r + R; q < std::min<int64_t>(M, r + 2 * R); ++q)
        for (int v = 0; v < NV; ++v) _mm_prefetch(reinterpret_cast<const char*>(C + q * ldc + 16 * v), _MM_HINT_T0);
    micro<R, NV, ACC>(K, A + r * sa_r, sa_r, sa_k, B, ldb, C + r * ldc, ldc, last, rs ? rs + r : nullptr);
  }
  if (r < M)
    micro_rows<NV, ACC, R - 1>(int(M - r), K, A + r * sa_r, sa_r, sa_k, B, ldb, C + r * ldc, ldc, last,
                               rs ? rs + r : nullptr);
}

// C[r][n] (+)= sum_k A[r*sa_r + k*sa_k] * B[k*ldb + n], r < M, n < N, k < K.
// With ACC and rs != nullptr: C[r][n] = rs[r] * C[r][n] + sum_k ...
// Columns go in chunks of 64 (6-row register blocks), so a 16-row group of gemm_tri splits 6+6+4.
template <bool ACC>
void gemm_bc(int64_t M, int64_t N, int64_t K, const float* A, int64_t sa_r, int64_t sa_k, const float* B,
             int64_t ldb, float* C, int64_t ldc, const float* rs = nullptr) {
  for (int64_t n0 = 0; n0 < N; n0 += 64) {
    const int64_t n = std::min<int64_t>(64, N - n0);
    const int nv = int((n + 15) / 16);
    const __mmask16 last = tail_mask(n - 16 * (nv - 1));
    const float* b = B + n0;
    float* c = C + n0;
    switch (nv) {
      case 1: gemm_nv<1, ACC>(M, K, A, sa_r, sa_k, b, ldb, c, ldc, last, rs); break;
      case 2: gemm_nv<2, ACC>(M, K, A, sa_r, sa_k, b, ldb, c, ldc, last, rs); break;
      case 3: gemm_nv<3, ACC>(M, K, A, sa_r, sa_k, b, ldb, c, ldc, last, rs); break;
      case 4: gemm_nv<4, ACC>(M, K, A, sa_r, sa_k, b, ldb, c, ldc, last, rs); break;
      case 5: gemm_nv<5, ACC>(M, K, A, sa_r, sa_k, b, ldb, c, ldc, last, rs); break;
      case 6: gemm_nv<6, ACC>(M, K, A, sa_r, sa_k, b, ldb, c, ldc, last, rs); break;
      case 7: gemm_nv<7, ACC>(M, K, A, sa_r, sa_k, b, ldb, c, ldc, last, rs); break;
      default: gemm_nv<8, ACC>(M, K, A, sa_r, sa_k, b, ldb, c, ldc, last, rs); break;
    }
  }
}
#else
template <bool ACC>
void gemm_bc(int64_t M, int64_t N, int64_t K, const float* A, int64_t sa_r, int64_t sa_k, const float* B,
             int64_t ldb, float* C, int64_t ldc, const float* rs = nullptr) {
  for (int64_t r = 0; r < M; ++r) {
    float* c = C + r * ldc;
    if (!ACC) std::fill(c, c + N, 0.f);
    if (ACC && rs)
      for (int64_t n = 0; n < N; ++n) c[n] *= rs[r];
    for (int64_t k = 0; k < K; ++k) {
      const float a = A[r * sa_r + k * sa_k];
      const float* b = B + k * ldb;
      for (int64_t n = 0; n < N; ++n) c[n] += a * b[n];
    }
  }
}
#endif

// gemm_bc that skips, per group of 16 rows, the columns or k range that are all masked.
// Skipped k terms are exact zeros, so results equal gemm_bc's (up to the sign of a zero).
// rs: optional row scale as in gemm_bc (only for KTo / None).
template <bool ACC>
void gemm_tri(Tri tri, int64_t d0, int64_t M, int64_t N, int64_t K, const float* A, int64_t sa_r, int64_t sa_k,
              const float* B, int64_t ldb, float* C, int64_t ldc, const float* rs = nullptr) {
  if (tri == Tri::None) return gemm_bc<ACC>(M, N, K, A, sa_r, sa_k, B, ldb, C, ldc, rs);
  constexpr int64_t G = 16;
  int64_t g0 = 0;
  if (tri == Tri::KFrom && d0 <= 0) {  // the groups g0 <= -d0 need all of k: one call, better register blocking
    g0 = std::min(M, (-d0 / G + 1) * G);
    gemm_bc<ACC>(g0, N, K, A, sa_r, sa_k, B, ldb, C, ldc);
  }
  for (; g0 < M; g0 += G) {
    const int64_t mg = std::min(G, M - g0);
    const float* a = A + g0 * sa_r;
    float* c = C + g0 * ldc;
    if (tri == Tri::LanesFrom) {
      const int64_t ls = std::clamp<int64_t>(g0 + d0, 0, N) / 16 * 16;
      if (ls < N) gemm_bc<ACC>(mg, N - ls, K, a, sa_r, sa_k, B + ls, ldb, c + ls, ldc);
    } else if (tri == Tri::ColsTo) {
      const int64_t ne = std::clamp<int64_t>(g0 + mg - d0, 0, N);
      if (ne > 0) gemm_bc<ACC>(mg, ne, K, a, sa_r, sa_k, B, ldb, c, ldc);
    } else if (tri == Tri::KFrom) {
      const int64_t kb = std::clamp<int64_t>(g0 + d0, 0, K);
      if (kb < K || !ACC) gemm_bc<ACC>(mg, N, K - kb, a + kb * sa_k, sa_r, sa_k, B + kb * ldb, ldb, c, ldc);
    } else {
      const int64_t ke = std::clamp<int64_t>(g0 + mg - d0, 0, K);
      if (ke > 0 || !ACC || rs) gemm_bc<ACC>(mg, N, ke, a, sa_r, sa_k, B, ldb, c, ldc, rs ? rs + g0 : nullptr);
    }
  }
}

#ifdef __AVX512F__
// In-register transpose of 16 rows of 16 floats: r[c] becomes column c.
inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int g = 0; g < 4; ++g) {  // rows 4g..4g+3
    __m512 *a = t + 4 * g, *o = r + 4 * g;
    o[0] = _mm512_shuffle_ps(a[0], a[2], _MM_SHUFFLE(1, 0, 1, 0));
    o[1] = _mm512_shuffle_ps(a[0], a[2], _MM_SHUFFLE(3, 2, 3, 2));
    o[2] = _mm512_shuffle_ps(a[1], a[3], _MM_SHUFFLE(1, 0, 1, 0));
    o[3] = _mm512_shuffle_ps(a[1], a[3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int h = 0; h < 2; ++h)  // rows 8h..8h+7
    for (int c = 0; c < 4; ++c) {
      t[8 * h + c] = _mm512_shuffle_f32x4(r[8 * h + c], r[8 * h + 4 + c], 0x88);
      t[8 * h + 4 + c] = _mm512_shuffle_f32x4(r[8 * h + c], r[8 * h + 4 + c], 0xdd);
    }
  for (int c = 0; c < 8; ++c) {
    r[c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0x88);
    r[8 + c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0xdd);
  }
}

// keep iff (bits >> 8) * 2^-24 >= p  <=>  (bits >> 8) >= ceil(p * 2^24)  (all values exact).
uint32_t keep_threshold(float p) {
  if (!(p > 0.f)) return 0;
  double t = std::ceil(double(p) * 16777216.0);
  return t >= 16777216.0 ? 16777216u : uint32_t(t);
}

// Philox4x32-10 on 16 consecutive counters ctr..ctr+15 (ctr_hi = 0), returning the 4 output words
// per counter. Bit-identical to philox4x32() in philox.h.
inline void philox16(uint64_t ctr, uint64_t key, __m512i out[4]) {
  alignas(64) uint32_t lo[16], hi[16];
  for (int k = 0; k < 16; ++k) {
    uint64_t c = ctr + uint64_t(k);
    lo[k] = uint32_t(c);
    hi[k] = uint32_t(c >> 32);
  }
  __m512i c0 = _mm512_load_si512(lo), c1 = _mm512_load_si512(hi);
  __m512i c2 = _mm512_setzero_si512(), c3 = _mm512_setzero_si512();
  const __m512i m0 = _mm512_set1_epi32(int(0xD2511F53u)), m1 = _mm512_set1_epi32(int(0xCD9E8D57u));
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int r = 0; r < 10; ++r) {
    __m512i e0 = _mm512_mul_epu32(c0, m0), o0 = _mm512_mul_epu32(_mm512_srli_epi64(c0, 32), m0);
    __m512i e1 = _mm512_mul_epu32(c2, m1), o1 = _mm512_mul_epu32(_mm512_srli_epi64(c2, 32), m1);
    __m512i hi0 = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(e0, 32), o0);
    __m512i lo0 = _mm512_mask_blend_epi32(0xAAAA, e0, _mm512_slli_epi64(o0, 32));
    __m512i hi1 = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(e1, 32), o1);
    __m512i lo1 = _mm512_mask_blend_epi32(0xAAAA, e1, _mm512_slli_epi64(o1, 32));
    __m512i n0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32(int(k0)));
    __m512i n2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32(int(k1)));
    c0 = n0; c1 = lo1; c2 = n2; c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

// Keep bits of the 64 elements 4*ctr .. 4*ctr+63.
inline uint64_t keep64(uint64_t ctr, uint64_t seed, __m512i thr) {
  __m512i w[4];
  philox16(ctr, seed, w);
  uint64_t bits = 0;
  static constexpr uint64_t kSpread = 0x1111111111111111ull;
  for (int j = 0; j < 4; ++j) {
    __mmask16 m = _mm512_cmpge_epu32_mask(_mm512_srli_epi32(w[j], 8), thr);
    bits |= _pdep_u64(uint64_t(m), kSpread << j);
  }
  return bits;
}
#endif

}  // namespace

void dropout_keep_bits(uint64_t* words, uint64_t seed, uint64_t start, int64_t n, float p) {
  if (n <= 0) return;
  const int64_t nw = (n + 63) / 64;
#ifdef __AVX512F__
  const __m512i thr = _mm512_set1_epi32(int(keep_threshold(p)));
  const uint64_t ctr = start >> 2;
  const unsigned shift = unsigned(start & 3);
  uint64_t cur = keep64(ctr, seed, thr);
  for (int64_t w = 0; w < nw; ++w) {
    uint64_t v = cur >> shift;
    // The next chunk is needed for the next word, or for this word's top `shift` bits.
    const int64_t last = int64_t(shift) + std::min<int64_t>(n, 64 * (w + 1)) - 1;  // stream index
    if (w + 1 < nw || last >= 64 * (w + 1)) {
      uint64_t next = keep64(ctr + 16 * uint64_t(w + 1), seed, thr);
      if (shift != 0) v |= next << (64 - shift);
      cur = next;
    }
    words[w] = v;
  }
#else
  for (int64_t w = 0; w < nw; ++w) {
    uint64_t v = 0;
    for (int64_t k = 0; k < 64 && w * 64 + k < n; ++k)
      v |= uint64_t(dropout_keep(seed, start + uint64_t(w * 64 + k), p)) << k;
    words[w] = v;
  }
#endif
  if (n % 64) words[nw - 1] &= (uint64_t(1) << (n % 64)) - 1;
}

namespace tile {

void pack_t(float* XT, int64_t ldt, const float* X, int64_t ld, int64_t ni, int64_t Nq, int64_t HS, float mul) {
#ifdef __AVX512F__
  const __m512 vm = _mm512_set1_ps(mul);
  for (int64_t i0 = 0; i0 < Nq; i0 += 16)
    for (int64_t d0 = 0; d0 < HS; d0 += 16) {
      const __mmask16 cm = tail_mask(HS - d0);
      __m512 r[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i)
        r[i] = i0 + i < ni ? _mm512_maskz_loadu_ps(cm, X + (i0 + i) * ld + d0) : _mm512_setzero_ps();
      transpose16(r);
      for (int64_t c = 0; c < std::min<int64_t>(16, HS - d0); ++c)
        _mm512_storeu_ps(XT + (d0 + c) * ldt + i0, _mm512_mul_ps(r[c], vm));
    }
#else
  for (int64_t ii = 0; ii < ni; ++ii) {
    const float* row = X + ii * ld;
    for (int64_t d = 0; d < HS; ++d) XT[d * ldt + ii] = row[d] * mul;
  }
  for (int64_t d = 0; d < HS; ++d) std::fill(XT + d * ldt + ni, XT + d * ldt + Nq, 0.f);
#endif
}

void pack_rows(float* dst, const float* src, int64_t ld, int64_t n, int64_t HS) {
#ifdef __AVX512F__
  for (int64_t r = 0; r < n; ++r)
    for (int64_t d = 0; d < HS; d += 16) {
      const __mmask16 m = tail_mask(HS - d);
      _mm512_mask_storeu_ps(dst + r * HS + d, m, _mm512_maskz_loadu_ps(m, src + r * ld + d));
    }
#else
  for (int64_t r = 0; r < n; ++r) std::memcpy(dst + r * HS, src + r * ld, size_t(HS) * sizeof(float));
#endif
}

void gemm(bool acc, Tri tri, int64_t d0, int64_t M, int64_t N, int64_t K, const float* A, int64_t sa_r, int64_t sa_k,
          const float* B, int64_t ldb, float* C, int64_t ldc, const float* rs) {
  if (acc)
    gemm_tri<true>(tri, d0, M, N, K, A, sa_r, sa_k, B, ldb, C, ldc, rs);
  else
    gemm_tri<false>(tri, d0, M, N, K, A, sa_r, sa_k, B, ldb, C, ldc);
}

}  // namespace tile

}  // namespace remat::kernels
