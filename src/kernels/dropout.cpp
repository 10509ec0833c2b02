#include "kernels/dropout.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/error.h"
#include "kernels/philox.h"
#include "kernels/simd.h"

namespace remat::kernels {

namespace {

constexpr int kGroups = 16;              // Philox calls per batch (one zmm of 32-bit counters)
constexpr int kBatch = 4 * kGroups;      // mask elements per batch
constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;

#if defined(__AVX512F__)
// Full 32x32 -> 64-bit products of 16 lanes: _mm512_mul_epu32 only multiplies even lanes, so run it on
// the even lanes and on the odd lanes shifted down, then blend the halves back into place.
inline void mul_hi_lo(__m512i a, __m512i m, __m512i& hi, __m512i& lo) {
  const __m512i pe = _mm512_mul_epu32(a, m);                         // even lanes, 64-bit products
  const __m512i po = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);  // odd lanes
  hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(pe, 32), po);
  lo = _mm512_mask_blend_epi32(0xAAAA, pe, _mm512_slli_epi64(po, 32));
}
#endif

// bits[4k + j] = philox4x32(g0 + k, 0, seed).v[j] for k < 16 (same rounds as philox.h; integer-only,
// so the AVX-512 path and the scalar fallback give identical bits).
inline void philox_batch(uint64_t g0, uint64_t seed, uint32_t* __restrict bits) {
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
#if defined(__AVX512F__)
  // Counters g0 + k as 64-bit lanes, split into low words (c0) and high words (c1).
  const __m512i g_lo = _mm512_add_epi64(_mm512_set1_epi64(int64_t(g0)), _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7));
  const __m512i g_hi = _mm512_add_epi64(g_lo, _mm512_set1_epi64(8));
  __m512i v0 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi64_epi32(g_lo)), _mm512_cvtepi64_epi32(g_hi), 1);
  __m512i v1 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi64_epi32(_mm512_srli_epi64(g_lo, 32))),
                                  _mm512_cvtepi64_epi32(_mm512_srli_epi64(g_hi, 32)), 1);
  __m512i v2 = _mm512_setzero_si512(), v3 = _mm512_setzero_si512();
  const __m512i m0 = _mm512_set1_epi32(int(kM0)), m1 = _mm512_set1_epi32(int(kM1));
  for (int r = 0; r < 10; ++r) {
    __m512i hi0, lo0, hi1, lo1;
    mul_hi_lo(v0, m0, hi0, lo0);
    mul_hi_lo(v2, m1, hi1, lo1);
    v0 = _mm512_xor_si512(_mm512_xor_si512(hi1, v1), _mm512_set1_epi32(int(k0)));
    v2 = _mm512_xor_si512(_mm512_xor_si512(hi0, v3), _mm512_set1_epi32(int(k1)));
    v1 = lo1;
    v3 = lo0;
    k0 += kW0;
    k1 += kW1;
  }
  // Transpose to element order: first (c0, c1) and (c2, c3) pairs per counter, then the pairs.
  const __m512i pair_lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i pair_hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  const __m512i quad_lo = _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11);
  const __m512i quad_hi = _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15);
  const __m512i a0 = _mm512_permutex2var_epi32(v0, pair_lo, v1), a1 = _mm512_permutex2var_epi32(v0, pair_hi, v1);
  const __m512i b0 = _mm512_permutex2var_epi32(v2, pair_lo, v3), b1 = _mm512_permutex2var_epi32(v2, pair_hi, v3);
  _mm512_store_si512(bits + 0, _mm512_permutex2var_epi64(a0, quad_lo, b0));
  _mm512_store_si512(bits + 16, _mm512_permutex2var_epi64(a0, quad_hi, b0));
  _mm512_store_si512(bits + 32, _mm512_permutex2var_epi64(a1, quad_lo, b1));
  _mm512_store_si512(bits + 48, _mm512_permutex2var_epi64(a1, quad_hi, b1));
#else
  uint32_t c0[kGroups], c1[kGroups], c2[kGroups] = {}, c3[kGroups] = {};
  for (int k = 0; k < kGroups; ++k) {
    c0[k] = uint32_t(g0 + uint64_t(k));
    c1[k] = uint32_t((g0 + uint64_t(k)) >> 32);
  }
  for (int r = 0; r < 10; ++r) {
    for (int k = 0; k < kGroups; ++k) {
      const uint64_t p0 = uint64_t(kM0) * c0[k], p1 = uint64_t(kM1) * c2[k];
      const uint32_t n0 = uint32_t(p1 >> 32) ^ c1[k] ^ k0, n1 = uint32_t(p1);
      const uint32_t n2 = uint32_t(p0 >> 32) ^ c3[k] ^ k1, n3 = uint32_t(p0);
      c0[k] = n0;
      c1[k] = n1;
      c2[k] = n2;
      c3[k] = n3;
    }
    k0 += kW0;
    k1 += kW1;
  }
  for (int k = 0; k < kGroups; ++k) {
    bits[4 * k + 0] = c0[k];
    bits[4 * k + 1] = c1[k];
    bits[4 * k + 2] = c2[k];
    bits[4 * k + 3] = c3[k];
  }
#endif
}

// dropout_keep(seed, o, p) is philox_uniform(seed, o) >= p, i.e. (bits >> 8) * 2^-24 >= p. Both sides
// are exact in float, so this is (bits >> 8) >= ceil(p * 2^24): an integer compare per element.
inline uint32_t keep_threshold(float p) { return uint32_t(std::ceil(double(p) * 16777216.0)); }

// Walks the Philox groups covering elements [offset, offset + N), batches aligned on offset / 4 so a
// group never straddles two batches, and calls f(i0, bits, lo, hi): element i0 + e (e in [lo, hi)) of
// the call has mask bits bits[e]. Batches are independent: parallel and deterministic by construction.
template <class F>
void for_each_mask_batch(int64_t N, uint64_t seed, uint64_t offset, F&& f) {
  const uint64_t first = offset / 4, last = (offset + uint64_t(N) - 1) / 4;  // group range, inclusive
  const int64_t nbatches = int64_t((last - first) / kGroups + 1);
#pragma omp parallel
  {
    // A private copy of f: its captures (pointers, scale) then provably do not alias the float outputs,
    // so the compiler keeps them in registers and vectorises f's loop.
    const std::decay_t<F> fn = f;
#pragma omp for schedule(static)
    for (int64_t b = 0; b < nbatches; ++b) {
      alignas(64) uint32_t bits[kBatch];
      const uint64_t g0 = first + uint64_t(b) * kGroups;
      philox_batch(g0, seed, bits);
      // Element index of bits[0] relative to the call; negative only in the first batch.
      const int64_t i0 = int64_t(g0 * 4 - offset);
      const int64_t lo = std::max<int64_t>(0, -i0), hi = std::min<int64_t>(kBatch, N - i0);
      fn(i0, bits, lo, hi);
    }
  }
}

}  // namespace

void dropout_forward(std::span<float> out, std::span<const float> inp, int64_t N, float p, uint64_t seed,
                     uint64_t offset) {
  REMAT_ASSERT(int64_t(out.size()) >= N && int64_t(inp.size()) >= N, "dropout_forward: span too small");
  REMAT_ASSERT(p >= 0.0f && p <= 1.0f, "dropout_forward: p must be in [0, 1]");
  if (N <= 0) return;
  float* o = out.data();
  const float* x = inp.data();
  if (p == 0.0f || p == 1.0f) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; ++i) o[i] = p == 0.0f ? x[i] : 0.0f;
    return;
  }
  const uint32_t thr = keep_threshold(p);
  const float scale = 1.0f / (1.0f - p);
  for_each_mask_batch(N, seed, offset, [=](int64_t i0, const uint32_t* bits, int64_t lo, int64_t hi) {
    for (int64_t e = lo; e < hi; ++e) o[i0 + e] = (bits[e] >> 8) >= thr ? x[i0 + e] * scale : 0.0f;
  });
}

void dropout_backward(std::span<float> dinp, std::span<const float> dout, int64_t N, float p, uint64_t seed,
                      uint64_t offset) {
  REMAT_ASSERT(int64_t(dinp.size()) >= N && int64_t(dout.size()) >= N, "dropout_backward: span too small");
  REMAT_ASSERT(p >= 0.0f && p <= 1.0f, "dropout_backward: p must be in [0, 1]");
  if (N <= 0 || p == 1.0f) return;  // p == 1: nothing was kept, no gradient flows
  float* dx = dinp.data();
  const float* d = dout.data();
  // forward was: out = keep ? inp * scale : 0, so dinp += keep ? dout * scale : 0 (one rounding: fma)
  if (p == 0.0f) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; ++i) dx[i] += d[i];
    return;
  }
  const uint32_t thr = keep_threshold(p);
  const float scale = 1.0f / (1.0f - p);
  for_each_mask_batch(N, seed, offset, [=](int64_t i0, const uint32_t* bits, int64_t lo, int64_t hi) {
    // Explicit fma: the vector body and the scalar edges of a batch then round identically, whatever
    // the compiler's contraction choices, so a gradient element never depends on where the call starts.
    for (int64_t e = lo; e < hi; ++e)
      dx[i0 + e] = (bits[e] >> 8) >= thr ? std::fma(d[i0 + e], scale, dx[i0 + e]) : dx[i0 + e];
  });
}

}  // namespace remat::kernels
