// FlashAttention-2 style causal attention on CPU. See flash_attention.h.
//
// Tiles are held transposed: for query tile [i0, i0+Br) and key tile [j0, j0+Bc) the scores live in
// ST[jj][ii] = s(i0+ii, j0+jj), so the vector lanes run over queries. The per-query online softmax
// (max, sum) then reduces vertically across rows with no horizontal reductions, and no score tile
// ever needs transposing: only Q^T (and dO^T) are packed, once per query tile.
// All small matrix products run on the shared micro-kernel (tile::gemm, attention_tile.h), which reads
// A at arbitrary (row, k) strides, so A^T operands cost nothing; on diagonal tiles it skips, per 16
// rows, the part that only multiplies masked zeros. The forward's online-softmax rescale of O is
// fused into the P V product (tile::gemm's row scale).
#include "kernels/flash_attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "kernels/attention_common.h"
#include "kernels/attention_tile.h"
#include "kernels/simd.h"

namespace remat::kernels {
namespace {

using tile::gemm;
using tile::pack_rows;
using tile::pack_t;
using tile::Tri;

constexpr int64_t Br = kFlashBr, Bc = kFlashBc;
static_assert(Br % 16 == 0, "query tile must be a multiple of the vector width");
static_assert(Bc <= 64, "keep bits of one query row in a tile must fit one uint64");

using attention_common::check_heads;
using attention_common::round16;
using attention_common::threads_for;
constexpr const char* kWho = "flash_attention";  // the messages' and the workspace function's name

// Per-thread workspace layout (floats, each part a multiple of 16):
//   QT  [HS x Br]  scaled Q^T of the query tile
//   XT  [HS x Br]  dO^T (backward) | O accumulator [Br x HS] (forward)
//   ST  [Bc x Br]  scores -> P -> dropped P
//   DT  [Bc x Br]  dPd -> dS (backward)
//   m, l / lse, D, alpha [3 x Br]; keep bits [Br uint64]
//   P0 [Bc x HS]   contiguous copy of V_j (forward) | K_j (backward)
//   P1, P2 [Br x HS] contiguous copies of Q_i, dO_i (backward)
// B operands of the micro-kernel are copied to contiguous tiles: read in place at the qkv row stride
// ((NH + 2*KVH)*HS floats, often a multiple of 4 KiB) their rows alias in L1 and the kernel loses ~20%.
struct Layout {
  int64_t qt, xt, st, dt, v0, v1, v2, bits, p0, p1, p2, total;
  explicit Layout(int64_t HS) {
    qt = 0;
    xt = qt + round16(HS * Br);
    st = xt + round16(HS * Br);
    dt = st + Bc * Br;
    v0 = dt + Bc * Br;
    v1 = v0 + Br;
    v2 = v1 + Br;
    bits = v2 + Br;
    p0 = bits + 2 * Br;
    p1 = p0 + round16(Bc * HS);
    p2 = p1 + round16(Br * HS);
    total = p2 + round16(Br * HS);
  }
};

// Lanes ii of a query tile that may attend key row jj: i0 + ii >= j0 + jj  <=>  ii >= d0 + jj.
inline int64_t first_valid(int64_t d0, int64_t jj) { return std::max<int64_t>(0, d0 + jj); }

#ifdef __AVX512F__

// Lanes 16v..16v+15 valid for key row jj (see first_valid).
inline __mmask16 valid_mask(int64_t d0, int64_t jj, int64_t v) {
  int64_t t = d0 + jj - 16 * v;
  return t <= 0 ? __mmask16(0xFFFF) : t >= 16 ? __mmask16(0) : __mmask16(0xFFFFu << t);
}

// Keep mask of lanes 16v.. for key row jj, from per-query keep bits (bit jj of bits[ii]).
inline __mmask16 keep_mask(__m512i lo, __m512i hi, int64_t jj) {
  const __m512i b = _mm512_set1_epi64(int64_t(uint64_t(1) << jj));
  return __mmask16(_mm512_test_epi64_mask(lo, b) | (unsigned(_mm512_test_epi64_mask(hi, b)) << 8));
}

#endif

inline bool keep_bit(const uint64_t* bits, int64_t ii, int64_t jj) { return (bits[ii] >> jj) & 1; }

// Keep bits for the tile: bit jj of bits[ii] = keep(i0+ii, j0+jj); 0 for ii >= ni.
void tile_bits(uint64_t* bits, int64_t ni, int64_t Nq, int64_t nj, uint64_t row_base, int64_t T, int64_t i0,
               int64_t j0, uint64_t seed, float p) {
  for (int64_t ii = 0; ii < ni; ++ii)
    dropout_keep_bits(bits + ii, seed, row_base + uint64_t((i0 + ii) * T + j0), nj, p);
  std::fill(bits + ni, bits + Nq, uint64_t(0));
}

// C: out row stride (NH*HS); C3: qkv row stride ((NH + 2*KVH)*HS); G query heads per kv head.
struct Dims {
  int64_t B, T, NH, KVH, HS, C, C3, G;
  float scale, p, inv_keep;
  uint64_t seed, offset;
};

// One (b, h, query tile) of the forward.
void forward_tile(const Dims& D, int64_t bh, int64_t i0, const float* qkv, float* out, float* lse, float* ws) {
  const int64_t T = D.T, HS = D.HS, C3 = D.C3, C = D.C, b = bh / D.NH, h = bh % D.NH;
  const Layout L(HS);
  float* QT = ws + L.qt;
  float* O = ws + L.xt;  // [Br x HS] accumulator
  float* ST = ws + L.st;
  float* m = ws + L.v0;
  float* l = ws + L.v1;
  float* alpha = ws + L.v2;
  uint64_t* bits = reinterpret_cast<uint64_t*>(ws + L.bits);
  float* Vp = ws + L.p0;
  const float* Q = qkv + b * T * C3 + h * HS;
  const float* K = qkv + b * T * C3 + (D.NH + h / D.G) * HS;
  const float* V = K + D.KVH * HS;
  const int64_t ni = std::min(Br, T - i0), Nq = round16(ni), jend = i0 + ni;
  const uint64_t row_base = D.offset + uint64_t(bh * T * T);

  pack_t(QT, Br, Q + i0 * C3, C3, ni, Nq, HS, D.scale);
  std::fill(m, m + Nq, -std::numeric_limits<float>::infinity());
  std::fill(l, l + Nq, 0.f);
  std::fill(O, O + ni * HS, 0.f);

  for (int64_t j0 = 0; j0 < jend; j0 += Bc) {
    const int64_t nj = std::min(Bc, jend - j0), d0 = j0 - i0;
    const bool diag = d0 + nj - 1 > 0;  // some (key, query) pairs of the tile are masked
    // ST = K_j (scale Q_i)^T : scaled scores, transposed.
    gemm(false, diag ? Tri::LanesFrom : Tri::None, d0, nj, Nq, HS, K + j0 * C3, C3, 1, QT, Br, ST, Br);
    if (D.p > 0.f) tile_bits(bits, ni, Nq, nj, row_base, T, i0, j0, D.seed, D.p);
#ifdef __AVX512F__
    const __m512 vinv = _mm512_set1_ps(D.inv_keep);
    for (int64_t v = 0; v < Nq / 16; ++v) {
      const __m512 mold = _mm512_loadu_ps(m + 16 * v);
      __m512 mx = mold;
      for (int64_t jj = 0; jj < nj; ++jj)
        mx = _mm512_mask_max_ps(mx, valid_mask(d0, jj, v), mx, _mm512_loadu_ps(ST + jj * Br + 16 * v));
      const __m512 al = exp512(_mm512_sub_ps(mold, mx));
      _mm512_storeu_ps(alpha + 16 * v, al);
      _mm512_storeu_ps(m + 16 * v, mx);
      __m512 sum = _mm512_setzero_ps();
      __m512i blo = _mm512_setzero_si512(), bhi = blo;
      if (D.p > 0.f) {
        blo = _mm512_loadu_si512(bits + 16 * v);
        bhi = _mm512_loadu_si512(bits + 16 * v + 8);
      }
      for (int64_t jj = 0; jj < nj; ++jj) {
        float* s = ST + jj * Br + 16 * v;
        __m512 e = _mm512_maskz_mov_ps(valid_mask(d0, jj, v), exp512(_mm512_sub_ps(_mm512_loadu_ps(s), mx)));
        sum = _mm512_add_ps(sum, e);
        if (D.p > 0.f) e = _mm512_maskz_mul_ps(keep_mask(blo, bhi, jj), e, vinv);
        _mm512_storeu_ps(s, e);
      }
      _mm512_storeu_ps(l + 16 * v, _mm512_fmadd_ps(_mm512_loadu_ps(l + 16 * v), al, sum));
    }
#else
    for (int64_t ii = 0; ii < Nq; ++ii) {
      float mx = m[ii];
      for (int64_t jj = 0; jj < nj; ++jj)
        if (ii >= first_valid(d0, jj)) mx = std::max(mx, ST[jj * Br + ii]);
      alpha[ii] = std::exp(m[ii] - mx);
      m[ii] = mx;
      float sum = 0.f;
      for (int64_t jj = 0; jj < nj; ++jj) {
        float& s = ST[jj * Br + ii];
        float e = ii >= first_valid(d0, jj) ? std::exp(s - mx) : 0.f;
        sum += e;
        if (D.p > 0.f) e = keep_bit(bits, ii, jj) ? e * D.inv_keep : 0.f;
        s = e;
      }
      l[ii] = l[ii] * alpha[ii] + sum;
    }
#endif
    // Online softmax: O_i = alpha * O_i + Pd_ij V_j (the rescale is fused into the micro-kernel).
    pack_rows(Vp, V + j0 * C3, C3, nj, HS);
    gemm(true, diag ? Tri::KTo : Tri::None, d0, ni, HS, nj, ST, 1, Br, Vp, HS, O, HS, alpha);
  }
  float* out_bh = out + b * T * C + h * HS;
  float* lse_bh = lse + bh * T;
  for (int64_t ii = 0; ii < ni; ++ii) {
    const float inv = 1.f / l[ii];
    const float* o = O + ii * HS;
    float* dst = out_bh + (i0 + ii) * C;
    for (int64_t d = 0; d < HS; ++d) dst[d] = o[d] * inv;
    lse_bh[i0 + ii] = m[ii] + std::log(l[ii]);
  }
}

// One query head (b, h) of the backward: query tiles outer, key tiles inner. Adds into dQ of head h
// and dK, dV of its kv head: the caller runs all query heads of a kv head on one thread, in order.
void backward_bh(const Dims& D, int64_t bh, const float* qkv, const float* out, const float* lse, const float* dout,
                 float* dqkv, float* ws) {
  const int64_t T = D.T, HS = D.HS, C3 = D.C3, C = D.C, b = bh / D.NH, h = bh % D.NH;
  const Layout L(HS);
  float* QT = ws + L.qt;
  float* dOT = ws + L.xt;
  float* ST = ws + L.st;
  float* DT = ws + L.dt;
  float* lse_t = ws + L.v0;
  float* Di = ws + L.v1;
  uint64_t* bits = reinterpret_cast<uint64_t*>(ws + L.bits);
  float* Kp = ws + L.p0;
  float* Qp = ws + L.p1;
  float* dOp = ws + L.p2;
  const float* Q = qkv + b * T * C3 + h * HS;
  const float* K = qkv + b * T * C3 + (D.NH + h / D.G) * HS;
  const float* V = K + D.KVH * HS;
  const float* O = out + b * T * C + h * HS;
  const float* dO = dout + b * T * C + h * HS;
  const float* lse_bh = lse + bh * T;
  float* dQ = dqkv + b * T * C3 + h * HS;
  float* dK = dqkv + b * T * C3 + (D.NH + h / D.G) * HS;
  float* dV = dK + D.KVH * HS;
  const uint64_t row_base = D.offset + uint64_t(bh * T * T);

  for (int64_t i0 = 0; i0 < T; i0 += Br) {
    const int64_t ni = std::min(Br, T - i0), Nq = round16(ni), jend = i0 + ni;
    pack_t(QT, Br, Q + i0 * C3, C3, ni, Nq, HS, D.scale);
    pack_t(dOT, Br, dO + i0 * C, C, ni, Nq, HS, 1.f);
    pack_rows(Qp, Q + i0 * C3, C3, ni, HS);
    pack_rows(dOp, dO + i0 * C, C, ni, HS);
    // D_i = rowsum(dO_i * O_i) = sum_j Pd_ij dPd_ij (the softmax-backward row term).
    for (int64_t ii = 0; ii < Nq; ++ii) {
      if (ii >= ni) {
        lse_t[ii] = 0.f;
        Di[ii] = 0.f;
        continue;
      }
      lse_t[ii] = lse_bh[i0 + ii];
      const float* o = O + (i0 + ii) * C;
      const float* g = dO + (i0 + ii) * C;
      float acc = 0.f;
#ifdef __AVX512F__
      __m512 va = _mm512_setzero_ps();
      for (int64_t d = 0; d < HS; d += 16) {
        const __mmask16 mk = tail_mask(HS - d);
        va = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, o + d), _mm512_maskz_loadu_ps(mk, g + d), va);
      }
      acc = _mm512_reduce_add_ps(va);
#else
      for (int64_t d = 0; d < HS; ++d) acc += o[d] * g[d];
#endif
      Di[ii] = acc;
    }
    for (int64_t j0 = 0; j0 < jend; j0 += Bc) {
      const int64_t nj = std::min(Bc, jend - j0), d0 = j0 - i0;
      const bool diag = d0 + nj - 1 > 0;
      // Recompute scaled scores S^T = K_j (scale Q_i)^T, and dPd^T = V_j dO_i^T
      // (forward: out = Pd V  =>  dPd = dOut V^T).
      gemm(false, diag ? Tri::LanesFrom : Tri::None, d0, nj, Nq, HS, K + j0 * C3, C3, 1, QT, Br, ST, Br);
      gemm(false, diag ? Tri::LanesFrom : Tri::None, d0, nj, Nq, HS, V + j0 * C3, C3, 1, dOT, Br, DT, Br);
      if (D.p > 0.f) tile_bits(bits, ni, Nq, nj, row_base, T, i0, j0, D.seed, D.p);
      // P = exp(S - lse); Pd = P * mask/(1-p); dP = dPd * mask/(1-p);
      // forward P = softmax(S)  =>  dS = P (dP - D_i); times scale for S = scale * Q K^T.
#ifdef __AVX512F__
      const __m512 vinv = _mm512_set1_ps(D.inv_keep), vsc = _mm512_set1_ps(D.scale);
      for (int64_t v = 0; v < Nq / 16; ++v) {
        const __m512 vl = _mm512_loadu_ps(lse_t + 16 * v), vd = _mm512_loadu_ps(Di + 16 * v);
        __m512i blo = _mm512_setzero_si512(), bhi = blo;
        if (D.p > 0.f) {
          blo = _mm512_loadu_si512(bits + 16 * v);
          bhi = _mm512_loadu_si512(bits + 16 * v + 8);
        }
        for (int64_t jj = 0; jj < nj; ++jj) {
          float* s = ST + jj * Br + 16 * v;
          float* dp = DT + jj * Br + 16 * v;
          const __mmask16 vm = valid_mask(d0, jj, v);
          const __m512 P = _mm512_maskz_mov_ps(vm, exp512(_mm512_sub_ps(_mm512_loadu_ps(s), vl)));
          __m512 Pd = P, g = _mm512_loadu_ps(dp);
          if (D.p > 0.f) {
            const __mmask16 keep = keep_mask(blo, bhi, jj);
            Pd = _mm512_maskz_mul_ps(keep, P, vinv);
            g = _mm512_maskz_mul_ps(keep, g, vinv);
          }
          _mm512_storeu_ps(s, Pd);
          _mm512_storeu_ps(dp, _mm512_maskz_mul_ps(vm, _mm512_mul_ps(P, vsc), _mm512_sub_ps(g, vd)));
        }
      }
#else
      for (int64_t jj = 0; jj < nj; ++jj) {
        const int64_t fv = first_valid(d0, jj);
        for (int64_t ii = 0; ii < Nq; ++ii) {
          float& s = ST[jj * Br + ii];
          float& dp = DT[jj * Br + ii];
          const float P = ii >= fv ? std::exp(s - lse_t[ii]) : 0.f;
          float Pd = P, g = dp;
          if (D.p > 0.f) {
            const bool keep = keep_bit(bits, ii, jj);
            Pd = keep ? P * D.inv_keep : 0.f;
            g = keep ? g * D.inv_keep : 0.f;
          }
          s = Pd;
          dp = ii >= fv ? P * D.scale * (g - Di[ii]) : 0.f;
        }
      }
#endif
      // dV_j += Pd_ij^T dO_i
      gemm(true, diag ? Tri::KFrom : Tri::None, d0, nj, HS, ni, ST, Br, 1, dOp, HS, dV + j0 * C3, C3);
      // dK_j += dS_ij^T Q_i
      gemm(true, diag ? Tri::KFrom : Tri::None, d0, nj, HS, ni, DT, Br, 1, Qp, HS, dK + j0 * C3, C3);
      // dQ_i += dS_ij K_j
      pack_rows(Kp, K + j0 * C3, C3, nj, HS);
      gemm(true, diag ? Tri::KTo : Tri::None, d0, ni, HS, nj, DT, 1, Br, Kp, HS, dQ + i0 * C3, C3);
    }
  }
}

Dims make_dims(int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HS, float p, uint64_t seed, uint64_t offset) {
  check_heads(kWho, NH, KVH, HS);
  REMAT_ASSERT(p >= 0.f && p < 1.f, "flash_attention: dropout p must be in [0, 1)");
  return Dims{B, T, NH, KVH, HS, NH * HS, (NH + 2 * KVH) * HS, NH / KVH, 1.f / std::sqrt(float(HS)), p,
              p > 0.f ? 1.f / (1.f - p) : 1.f, seed, offset};
}

}  // namespace

int64_t flash_attention_workspace_floats(int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HS,
                                         int64_t threads) {
  check_heads(kWho, NH, KVH, HS);
  return std::max<int64_t>(threads, 1) * Layout(HS).total;
}

void flash_attention_forward(std::span<float> out, std::span<float> lse, std::span<const float> qkv, int64_t B,
                             int64_t T, int64_t NH, int64_t KVH, int64_t HS, float p, uint64_t seed, uint64_t offset,
                             std::span<float> workspace) {
  const Dims D = make_dims(B, T, NH, KVH, HS, p, seed, offset);
  REMAT_ASSERT(int64_t(qkv.size()) >= B * T * D.C3, "flash_attention: qkv too small");
  REMAT_ASSERT(int64_t(out.size()) >= B * T * D.C, "flash_attention: out too small");
  REMAT_ASSERT(int64_t(lse.size()) >= B * NH * T, "flash_attention: lse too small");
  if (B * T == 0) return;
  const int64_t per = Layout(D.HS).total, ntiles = (T + Br - 1) / Br, items = B * NH * ntiles;
  const int nthr = threads_for(kWho, workspace, per);
  // Items in decreasing cost (last query tiles first) for dynamic load balancing. Each item writes
  // its own rows of out/lse, so the schedule does not affect the result.
#pragma omp parallel for schedule(dynamic, 1) num_threads(nthr)
  for (int64_t it = 0; it < items; ++it) {
    const int64_t tile = ntiles - 1 - it / (B * NH), bh = it % (B * NH);
    forward_tile(D, bh, tile * Br, qkv.data(), out.data(), lse.data(), workspace.data() + per * omp_get_thread_num());
  }
}

void flash_attention_backward(std::span<float> dqkv, std::span<const float> dout, std::span<const float> qkv,
                              std::span<const float> out, std::span<const float> lse, int64_t B, int64_t T,
                              int64_t NH, int64_t KVH, int64_t HS, float p, uint64_t seed, uint64_t offset,
                              std::span<float> workspace) {
  const Dims D = make_dims(B, T, NH, KVH, HS, p, seed, offset);
  REMAT_ASSERT(int64_t(qkv.size()) >= B * T * D.C3, "flash_attention: qkv too small");
  REMAT_ASSERT(int64_t(dqkv.size()) >= B * T * D.C3, "flash_attention: dqkv too small");
  REMAT_ASSERT(int64_t(out.size()) >= B * T * D.C, "flash_attention: out too small");
  REMAT_ASSERT(int64_t(dout.size()) >= B * T * D.C, "flash_attention: dout too small");
  REMAT_ASSERT(int64_t(lse.size()) >= B * NH * T, "flash_attention: lse too small");
  if (B * T == 0) return;
  const int64_t per = Layout(D.HS).total;
  const int nthr = threads_for(kWho, workspace, per);
  // One (b, kv head) per item: its query heads run on one thread in increasing order, so each dK, dV
  // element has one writer and a fixed summation order. Every dQ element belongs to one item.
#pragma omp parallel for schedule(dynamic, 1) num_threads(nthr)
  for (int64_t bg = 0; bg < B * KVH; ++bg)
    for (int64_t bh = bg * D.G; bh < (bg + 1) * D.G; ++bh)
      backward_bh(D, bh, qkv.data(), out.data(), lse.data(), dout.data(), dqkv.data(),
                  workspace.data() + per * omp_get_thread_num());
}

}  // namespace remat::kernels
