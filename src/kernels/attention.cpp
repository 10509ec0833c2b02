// Naive causal attention: materialises the (T, T) scores per (b, h). See attention.h.
//
// Work is done in tiles of kRB queries. The products run on the shared AVX-512 micro-kernel
// (tile::gemm, attention_tile.h), row-major: query rows x key columns. Per group of 16 query rows
// only the keys up to the group's last row are multiplied, so the causal mask wastes at most a
// 16 x 16 triangle per group instead of a kRB-row block. K^T and V (forward), V^T and K (backward)
// are packed contiguously first; the backward packs a kv head's V^T and K once for all its query
// heads.
#include "kernels/attention.h"

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

// Queries per tile: the forward's work item, the backward's step. A multiple of 16, so 16-row groups
// of a tile start at multiples of 16 in absolute query index.
constexpr int64_t kRB = 64;

using attention_common::check_heads;
using attention_common::round16;
using attention_common::threads_for;
constexpr const char* kWho = "attention";  // the messages' and the workspace function's name

// Per-thread workspace (floats), with Tp = round16(T) + 16: T-long rows are padded so that rows of
// the micro-kernel's operands do not alias in L1 (a stride of 1024 floats maps them to one set).
//   X0 [HS x Tp]  scaled K^T (forward) | V^T (backward)
//   X1 [Tp x HS]  V (forward) | K (backward), contiguous rows
//   R0 [kRB x Tp] dropped probs of the tile (forward: only when p > 0)
//   R1 [kRB x Tp] dPd -> dS of the tile (backward)
//   Qp, dOp [kRB x HS] the tile's Q and dO rows (backward)
//   keep bits of one row ((T+63)/64 uint64 = 2 floats each)
struct Layout {
  int64_t tp, x0, x1, r0, r1, qp, dop, bits, total;
  Layout(int64_t T, int64_t HS) : tp(round16(T) + 16) {
    x0 = 0;
    x1 = x0 + round16(HS * tp);
    r0 = x1 + round16(tp * HS);
    r1 = r0 + kRB * tp;
    qp = r1 + kRB * tp;
    dop = qp + round16(kRB * HS);
    bits = dop + round16(kRB * HS);
    total = bits + round16(2 * ((T + 63) / 64));
  }
};

// out = softmax(row[0..n)) in place (row already scaled); row[n..end) = 0.
void softmax_row(float* row, int64_t n, int64_t end) {
#ifdef __AVX512F__
  __m512 vm = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t j = 0; j < n; j += 16)
    vm = _mm512_max_ps(vm, _mm512_mask_loadu_ps(vm, tail_mask(n - j), row + j));
  __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(vm));
  __m512 vs = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; j += 16) {
    __mmask16 m = tail_mask(n - j);
    __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, row + j), mx));
    vs = _mm512_mask_add_ps(vs, m, vs, e);
    _mm512_mask_storeu_ps(row + j, m, e);
  }
  __m512 inv = _mm512_set1_ps(1.f / _mm512_reduce_add_ps(vs));
  for (int64_t j = 0; j < n; j += 16) {
    __mmask16 m = tail_mask(n - j);
    _mm512_mask_storeu_ps(row + j, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, row + j), inv));
  }
#else
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) mx = std::max(mx, row[j]);
  float s = 0.f;
  for (int64_t j = 0; j < n; ++j) {
    row[j] = std::exp(row[j] - mx);
    s += row[j];
  }
  float inv = 1.f / s;
  for (int64_t j = 0; j < n; ++j) row[j] *= inv;
#endif
  std::fill(row + n, row + end, 0.f);
}

[[maybe_unused]] inline bool bit(const uint64_t* w, int64_t j) { return (w[j >> 6] >> (j & 63)) & 1; }

// dst[j] = keep_j ? src[j] * inv : 0 for j < n (keep bits as from dropout_keep_bits).
void apply_keep(float* dst, const float* src, const uint64_t* bits, int64_t n, float inv) {
#ifdef __AVX512F__
  const __m512 vinv = _mm512_set1_ps(inv);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = __mmask16(bits[j >> 6] >> (j & 63)) & tail_mask(n - j);
    _mm512_mask_storeu_ps(dst + j, tail_mask(n - j), _mm512_maskz_mul_ps(m, _mm512_maskz_loadu_ps(m, src + j), vinv));
  }
#else
  for (int64_t j = 0; j < n; ++j) dst[j] = bit(bits, j) ? src[j] * inv : 0.f;
#endif
}

}  // namespace

int64_t attention_workspace_floats(int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HS, int64_t threads) {
  check_heads(kWho, NH, KVH, HS);
  return std::max<int64_t>(threads, 1) * Layout(T, HS).total;
}

namespace {
// The checks forward and backward share: qkv (B,T,(NH+2KVH)HS), the (B,T,NH*HS) output or its
// gradient, and the (B,NH,T,T) probabilities.
void check_args(size_t qkv, size_t out, size_t probs, int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HS,
                float p) {
  check_heads(kWho, NH, KVH, HS);
  REMAT_ASSERT(int64_t(qkv) >= B * T * (NH + 2 * KVH) * HS, "attention: qkv too small");
  REMAT_ASSERT(int64_t(out) >= B * T * NH * HS, "attention: out / dout too small");
  REMAT_ASSERT(int64_t(probs) >= B * NH * T * T, "attention: probs too small");
  REMAT_ASSERT(p >= 0.f && p < 1.f, "attention: dropout p must be in [0, 1)");
}

// End (exclusive) of the columns that the 16-row group of query i reads in a tile of jend keys
// starting at query i0 (see tile::Tri::ColsTo / KTo): row i's entries from i+1 up to there must be 0.
int64_t group_end(int64_t i, int64_t i0, int64_t jend) { return std::min(jend, i0 + ((i - i0) / 16 + 1) * 16); }

// The probabilities of query rows i0..i0+ni-1 of one head, rows of S (stride T): S = Q (scale K)^T
// for keys 0..i0+ni-1 (KT: the head's scaled K^T, packed with stride tp), then the causal softmax of
// each row, which also writes the masked part of the row as 0. The one code attention_forward and
// attention_probs_forward share, so the two write the same bits.
void probs_tile(float* S, int64_t T, const float* Q, int64_t C3, const float* KT, int64_t tp, int64_t i0, int64_t ni,
                int64_t HS) {
  tile::gemm(false, tile::Tri::ColsTo, -i0, ni, i0 + ni, HS, Q + i0 * C3, C3, 1, KT, tp, S, T);
  for (int64_t ii = 0; ii < ni; ++ii) softmax_row(S + ii * T, i0 + ii + 1, T);
}

// Per-thread workspace of attention_probs_forward: the packed K^T alone.
int64_t probs_floats_per_thread(int64_t T, int64_t HS) { return round16(HS * Layout(T, HS).tp); }
}  // namespace

void attention_forward(std::span<float> out, std::span<float> probs, std::span<const float> qkv,
                       int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HS, float p, uint64_t seed,
                       uint64_t offset, std::span<float> workspace) {
  check_args(qkv.size(), out.size(), probs.size(), B, T, NH, KVH, HS, p);
  if (B * T == 0) return;
  // C: out row stride; C3: qkv row stride; G query heads per kv head.
  const int64_t C = NH * HS, C3 = (NH + 2 * KVH) * HS, G = NH / KVH;
  const Layout L(T, HS);
  const float scale = 1.f / std::sqrt(float(HS));
  const float inv_keep = p > 0.f ? 1.f / (1.f - p) : 1.f;
  const int nthr = threads_for(kWho, workspace, L.total);

  // One (b, h) per iteration, so K^T and V are packed once per query head; each writes its own rows
  // of out and probs.
#pragma omp parallel for schedule(static) num_threads(nthr)
  for (int64_t bh = 0; bh < B * NH; ++bh) {
    const int64_t b = bh / NH, h = bh % NH;
    float* ws = workspace.data() + L.total * omp_get_thread_num();
    float* KT = ws + L.x0;
    float* Vp = ws + L.x1;
    float* Pd = ws + L.r0;  // dropped probs of the tile when p > 0
    uint64_t* bits = reinterpret_cast<uint64_t*>(ws + L.bits);
    const float* Q = qkv.data() + b * T * C3 + h * HS;
    const float* K = qkv.data() + b * T * C3 + (NH + h / G) * HS;
    const float* V = K + KVH * HS;
    tile::pack_t(KT, L.tp, K, C3, T, round16(T), HS, scale);
    tile::pack_rows(Vp, V, C3, T, HS);
    for (int64_t i0 = 0; i0 < T; i0 += kRB) {
      const int64_t ni = std::min(kRB, T - i0), jend = i0 + ni;
      float* S = probs.data() + (bh * T + i0) * T;
      float* O = out.data() + (b * T + i0) * C + h * HS;

      probs_tile(S, T, Q, C3, KT, L.tp, i0, ni, HS);

      const float* A = S;
      int64_t lda = T;
      if (p > 0.f) {  // Pd = P * keep / (1-p), zero above the diagonal up to the row's group end.
        for (int64_t ii = 0; ii < ni; ++ii) {
          const int64_t i = i0 + ii;
          float* dr = Pd + ii * L.tp;
          dropout_keep_bits(bits, seed, offset + uint64_t((bh * T + i) * T), i + 1, p);
          apply_keep(dr, S + ii * T, bits, i + 1, inv_keep);
          std::fill(dr + i + 1, dr + group_end(i, i0, jend), 0.f);
        }
        A = Pd;
        lda = L.tp;
      }
      // out = Pd V.
      tile::gemm(false, tile::Tri::KTo, -i0, ni, HS, jend, A, lda, 1, Vp, HS, O, C);
    }
  }
}

int64_t attention_probs_workspace_floats(int64_t T, int64_t HS, int64_t threads) {
  REMAT_ASSERT(HS > 0, "attention: HS must be positive");
  return std::max<int64_t>(threads, 1) * probs_floats_per_thread(T, HS);
}

void attention_probs_forward(std::span<float> probs, std::span<const float> qkv, int64_t B, int64_t T, int64_t NH,
                             int64_t KVH, int64_t HS, std::span<float> workspace) {
  check_heads(kWho, NH, KVH, HS);
  REMAT_ASSERT(int64_t(qkv.size()) >= B * T * (NH + 2 * KVH) * HS, "attention: qkv too small");
  REMAT_ASSERT(int64_t(probs.size()) >= B * NH * T * T, "attention: probs too small");
  if (B * T == 0) return;
  const int64_t C3 = (NH + 2 * KVH) * HS, G = NH / KVH;
  const int64_t per_thread = probs_floats_per_thread(T, HS), tp = Layout(T, HS).tp;
  const float scale = 1.f / std::sqrt(float(HS));
  const int nthr = threads_for(kWho, workspace, per_thread);

  // As attention_forward, without V: pack the head's scaled K^T, then each query tile's scores and
  // softmax. No dropout (probs are pre-dropout), no P V.
#pragma omp parallel for schedule(static) num_threads(nthr)
  for (int64_t bh = 0; bh < B * NH; ++bh) {
    const int64_t b = bh / NH, h = bh % NH;
    float* KT = workspace.data() + per_thread * omp_get_thread_num();
    const float* Q = qkv.data() + b * T * C3 + h * HS;
    const float* K = qkv.data() + b * T * C3 + (NH + h / G) * HS;
    tile::pack_t(KT, tp, K, C3, T, round16(T), HS, scale);
    for (int64_t i0 = 0; i0 < T; i0 += kRB)
      probs_tile(probs.data() + (bh * T + i0) * T, T, Q, C3, KT, tp, i0, std::min(kRB, T - i0), HS);
  }
}

void attention_backward(std::span<float> dqkv, std::span<const float> dout, std::span<const float> qkv,
                        std::span<const float> probs, int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HS,
                        float p, uint64_t seed, uint64_t offset, std::span<float> workspace) {
  check_args(qkv.size(), dout.size(), probs.size(), B, T, NH, KVH, HS, p);
  const int64_t C = NH * HS, C3 = (NH + 2 * KVH) * HS, G = NH / KVH;
  REMAT_ASSERT(int64_t(dqkv.size()) >= B * T * C3, "attention: dqkv too small");
  if (B * T == 0) return;
  const Layout L(T, HS);
  const float scale = 1.f / std::sqrt(float(HS));
  const float inv_keep = p > 0.f ? 1.f / (1.f - p) : 1.f;
  const int nthr = threads_for(kWho, workspace, L.total);

  // One (b, kv head) per iteration: it owns that kv head's dK, dV and its G query heads' dQ. It
  // accumulates them over its query heads in increasing order, each over query tiles in order.
#pragma omp parallel for schedule(static) num_threads(nthr)
  for (int64_t bg = 0; bg < B * KVH; ++bg) {
    const int64_t b = bg / KVH, kvh = bg % KVH;
    float* ws = workspace.data() + L.total * omp_get_thread_num();
    float* VT = ws + L.x0;
    float* Kp = ws + L.x1;
    float* Pd = ws + L.r0;  // dropped probs of the tile
    float* dS = ws + L.r1;  // dPd, then dS in place
    float* Qp = ws + L.qp;
    float* dOp = ws + L.dop;
    uint64_t* bits = reinterpret_cast<uint64_t*>(ws + L.bits);
    const float* K = qkv.data() + b * T * C3 + (NH + kvh) * HS;
    const float* V = K + KVH * HS;
    float* dK = dqkv.data() + b * T * C3 + (NH + kvh) * HS;
    float* dV = dK + KVH * HS;

    tile::pack_t(VT, L.tp, V, C3, T, round16(T), HS, 1.f);
    tile::pack_rows(Kp, K, C3, T, HS);
    for (int64_t h = kvh * G; h < (kvh + 1) * G; ++h) {
      const int64_t bh = b * NH + h;
      const float* Q = qkv.data() + b * T * C3 + h * HS;
      const float* dO = dout.data() + b * T * C + h * HS;
      float* dQ = dqkv.data() + b * T * C3 + h * HS;
      for (int64_t i0 = 0; i0 < T; i0 += kRB) {
        const int64_t ni = std::min(kRB, T - i0), jend = i0 + ni;
        const float* P = probs.data() + (bh * T + i0) * T;
        tile::pack_rows(Qp, Q + i0 * C3, C3, ni, HS);
        tile::pack_rows(dOp, dO + i0 * C, C, ni, HS);
        // Forward: out = Pd V with Pd = P * mask / (1-p).  =>  dPd = dOut V^T.
        tile::gemm(false, tile::Tri::ColsTo, -i0, ni, jend, HS, dO + i0 * C, C, 1, VT, L.tp, dS, L.tp);
        // Forward: P = softmax(S) row-wise  =>  dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik),
        // with dP = dPd * mask / (1-p); the 1/sqrt(HS) of S = scale * Q K^T is folded into dS.
        // Entries above the diagonal up to the row's group end are zeroed for the products below.
        for (int64_t ii = 0; ii < ni; ++ii) {
          const float* pr = P + ii * T;
          float* sr = dS + ii * L.tp;
          const int64_t n = i0 + ii + 1, end = group_end(i0 + ii, i0, jend);
          // Pd row: P * keep / (1-p), or P itself, copied to the padded stride for the dV product.
          float* dr = Pd + ii * L.tp;
          if (p > 0.f) {
            dropout_keep_bits(bits, seed, offset + uint64_t((bh * T + i0 + ii) * T), n, p);
            apply_keep(dr, pr, bits, n, inv_keep);
            apply_keep(sr, sr, bits, n, inv_keep);
          } else {
            std::copy(pr, pr + n, dr);
          }
          std::fill(dr + n, dr + end, 0.f);
          float d = 0.f;
#ifdef __AVX512F__
          __m512 vd = _mm512_setzero_ps();
          for (int64_t j = 0; j < n; j += 16) {
            __mmask16 m = tail_mask(n - j);
            vd = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, pr + j), _mm512_maskz_loadu_ps(m, sr + j), vd);
          }
          d = _mm512_reduce_add_ps(vd);
          const __m512 vdd = _mm512_set1_ps(d), vsc = _mm512_set1_ps(scale);
          for (int64_t j = 0; j < n; j += 16) {
            __mmask16 m = tail_mask(n - j);
            __m512 ds = _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, pr + j), vsc),
                                      _mm512_sub_ps(_mm512_maskz_loadu_ps(m, sr + j), vdd));
            _mm512_mask_storeu_ps(sr + j, m, ds);
          }
#else
          for (int64_t j = 0; j < n; ++j) d += pr[j] * sr[j];
          for (int64_t j = 0; j < n; ++j) sr[j] = pr[j] * scale * (sr[j] - d);
#endif
          std::fill(sr + n, sr + end, 0.f);
        }
        // dQ_i += dS K
        tile::gemm(true, tile::Tri::KTo, -i0, ni, HS, jend, dS, L.tp, 1, Kp, HS, dQ + i0 * C3, C3);
        // dV[j] += sum_{i in tile, i >= j} Pd[i][j] dO[i]
        tile::gemm(true, tile::Tri::KFrom, -i0, jend, HS, ni, Pd, 1, L.tp, dOp, HS, dV, C3);
        // Forward: S = scale * Q K^T  =>  dK += dS^T Q (scale already in dS)
        tile::gemm(true, tile::Tri::KFrom, -i0, jend, HS, ni, dS, 1, L.tp, Qp, HS, dK, C3);
      }
    }
  }
}

}  // namespace remat::kernels
