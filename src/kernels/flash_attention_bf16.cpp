// Flash attention on bf16: see flash_attention_bf16.h. Operands packed per key tile (pack_bf16.h)
// for the pair kernels (dot_bf16_gemm_rows, dot_bf16.h: AMX tiles where the CPU has them); dK and dV
// accumulate transposed (dK^T += Q^T dS) so every A operand has its pairs along rows.
#include "kernels/flash_attention_bf16.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/attention_common.h"
#include "kernels/attention_tile.h"  // dropout_keep_bits
#include "kernels/dot_bf16.h"
#include "kernels/exp_fast.h"
#include "kernels/flash_attention.h"  // kFlashBr, kFlashBc
#include "kernels/pack_bf16.h"
#include "kernels/vec16.h"
#include "kernels/vec_bf16.h"

namespace remat::kernels {
namespace {

using namespace pack_bf16;
constexpr int64_t Br = kFlashBr, Bc = kFlashBc;
static_assert(Br == Bc && Br % 16 == 0, "aligned square tiles: every key tile a query needs starts at or before it");

using attention_common::check_heads;
using attention_common::round16;
using attention_common::threads_for;
constexpr const char* kWho = "flash_attention_bf16";  // the messages' and the workspace function's name

using vec16::kLanes;
using vec16::v16f;
// Lanes j..j+15 of a score row, scaled; -inf past n (exp gives 0 there, max ignores it). The row
// holds at least j + 16 floats (a tile row of Bc): lanes past n are read and replaced.
inline v16f lanes(const float* s, int64_t n, int64_t j, float scale) {
  typedef int32_t v16i __attribute__((vector_size(64)));
  const v16i lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  const v16f v = vec16::load16(s + j) * scale;
  return lane < v16i{} + int32_t(n - j) ? v : v16f{} - INFINITY;
}

// Per-thread workspace, in 4-byte units; HSw = ceil(HS/2) pair words, HSq = round16(HS).
//   forward:  Qt [Br x HSw] | KT [HSw x Bc] | Vv [Bc/2 x HSq] | S [Br x Bc] | Pt [Br x Bc/2] | O [Br x HSq] |
//             m, l [Br] | bits
//   backward: Qt, dOt [Br x HSw] | Qv, dOv [HSq x Br/2] vnni_t | KT, VT [HSw x Tp] | Kv [Tq/2 x HSq] |
//             S, dP [Br x Bc] | Pd, dSr [Br x Bc/2] | PdV, dSV [Br/2 x Bc] | dQ [Br x HSq] | D [Br] | bits |
//             dKa, dVa [HSq x Tp] (transposed); Tq = round16(T) and the row stride Tp = Tq + 16 (rows
//             a power of two apart would map a tile's 16 rows to a few L1 sets). The kv head's K and V
//             are packed once for all its query heads and tiles.
struct Layout {
  int64_t HSw, HSq, Tq, Tp;
  int64_t bits = 0;                                                      // one word of keep bits, both
  int64_t qt, kt, vv, s, pt, o, m, l;                                    // forward
  int64_t bqt, dot, qv, dov, bkt, vt, kv, bs, dp, pd, dsr, pdv, dsv, dq, d, dka, dva;  // backward
  int64_t total;
  Layout(int64_t T, int64_t HS) : HSw((HS + 1) / 2), HSq(round16(HS)), Tq(round16(T)), Tp(Tq + 16) {
    auto r16 = round16;
    qt = 16;
    kt = qt + r16(Br * HSw);
    vv = kt + r16(HSw * Bc);
    s = vv + Bc / 2 * HSq;
    pt = s + Br * Bc;
    o = pt + Br * Bc / 2;
    m = o + Br * HSq;
    l = m + Br;
    const int64_t fwd_end = l + Br;
    bqt = 16;
    dot = bqt + r16(Br * HSw);
    qv = dot + r16(Br * HSw);
    dov = qv + Br / 2 * HSq;
    bkt = dov + Br / 2 * HSq;
    vt = bkt + r16(HSw * Tp);
    kv = vt + r16(HSw * Tp);
    bs = kv + Tq / 2 * HSq;
    dp = bs + Br * Bc;
    pd = dp + Br * Bc;
    dsr = pd + Br * Bc / 2;
    pdv = dsr + Br * Bc / 2;
    dsv = pdv + Br / 2 * Bc;
    dq = dsv + Br / 2 * Bc;
    d = dq + Br * HSq;
    dka = d + r16(Br);
    dva = dka + HSq * Tp;
    total = std::max(fwd_end, dva + HSq * Tp);
  }
};

// Adds an fp32 row to a bf16 row: dst = bf16(dst + src), n elements.
void add_row(bf16* dst, const float* src, int64_t n) {
  float t[256];
  for (int64_t d0 = 0; d0 < n; d0 += 256) {
    const int64_t len = std::min<int64_t>(256, n - d0);
    for (int64_t k = 0; k < len; ++k) t[k] = bf16_to_float(dst[d0 + k]) + src[d0 + k];
    to_bf16(dst + d0, t, len);
  }
}

void check_args(size_t qkv, size_t out, size_t lse, int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HS,
                float p) {
  check_heads(kWho, NH, KVH, HS);
  REMAT_ASSERT(int64_t(qkv) >= B * T * (NH + 2 * KVH) * HS, "flash_attention_bf16: qkv too small");
  REMAT_ASSERT(int64_t(out) >= B * T * NH * HS, "flash_attention_bf16: out / dout too small");
  REMAT_ASSERT(int64_t(lse) >= B * NH * T, "flash_attention_bf16: lse too small");
  REMAT_ASSERT(p >= 0.f && p < 1.f, "flash_attention_bf16: dropout p must be in [0, 1)");
}

}  // namespace

int64_t flash_attention_bf16_workspace_floats(int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HS,
                                              int64_t threads) {
  check_heads(kWho, NH, KVH, HS);
  return std::max<int64_t>(threads, 1) * Layout(T, HS).total;
}

void flash_attention_bf16_forward(std::span<bf16> out, std::span<float> lse, std::span<const bf16> qkv, int64_t B,
                                  int64_t T, int64_t NH, int64_t KVH, int64_t HS, float p, uint64_t seed,
                                  uint64_t offset, std::span<float> workspace) {
  check_args(qkv.size(), out.size(), lse.size(), B, T, NH, KVH, HS, p);
  if (B * T == 0) return;
  const int64_t C = NH * HS, C3 = (NH + 2 * KVH) * HS, G = NH / KVH, ntiles = (T + Br - 1) / Br;
  const Layout L(T, HS);
  const float scale = 1.f / std::sqrt(float(HS));
  const float inv_keep = p > 0.f ? 1.f / (1.f - p) : 1.f;
  const int nthr = threads_for(kWho, workspace, L.total);
#pragma omp parallel for schedule(dynamic, 1) num_threads(nthr)
  for (int64_t item = 0; item < B * NH * ntiles; ++item) {
    const int64_t bh = item / ntiles, b = bh / NH, h = bh % NH, i0 = (item % ntiles) * Br;
    const int64_t ni = std::min(Br, T - i0), jend = i0 + ni;
    float* ws = workspace.data() + L.total * omp_get_thread_num();
    auto words = [&](int64_t off) { return reinterpret_cast<bf16x2*>(ws + off); };
    bf16x2 *Qt = words(L.qt), *KT = words(L.kt), *Vv = words(L.vv), *Pt = words(L.pt);
    float *S = ws + L.s, *O = ws + L.o, *m = ws + L.m, *l = ws + L.l;
    uint64_t* bits = reinterpret_cast<uint64_t*>(ws + L.bits);
    const bf16* Q = qkv.data() + b * T * C3 + h * HS;
    const bf16* K = qkv.data() + b * T * C3 + (NH + h / G) * HS;
    const bf16* V = K + KVH * HS;
    pack_pairs_rows(Qt, L.HSw, Q + i0 * C3, C3, ni, HS, ni);
    std::fill(O, O + ni * L.HSq, 0.f);
    std::fill(m, m + ni, -INFINITY);
    std::fill(l, l + ni, 0.f);
    for (int64_t j0 = 0; j0 < jend; j0 += Bc) {
      const int64_t nj = std::min(Bc, jend - j0);
      pack_pairs_t(KT, Bc, K + j0 * C3, C3, nj, HS, Bc);
      pack_vnni(Vv, L.HSq, V + j0 * C3, C3, nj, HS, Bc, L.HSq);
      dot_bf16_gemm_rows(false, ni, round16(nj), L.HSw, Qt, L.HSw, KT, Bc, S, Bc);
      for (int64_t ii = 0; ii < ni; ++ii) {
        const int64_t i = i0 + ii, cnt = std::min(nj, i - j0 + 1);  // >= 1: tiles are aligned squares
        float* s = S + ii * Bc;
        // Scaled scores, their max, the exponentials and their sum, in 16 lanes (the tail padded with
        // -inf, whose exp is 0) and a fixed tree.
        v16f vm = lanes(s, cnt, 0, scale);
        for (int64_t j = kLanes; j < cnt; j += kLanes) {
          const v16f v = lanes(s, cnt, j, scale);
          vm = v > vm ? v : vm;
        }
        const float mx = hmax16(vm);
        const float m_new = std::max(m[ii], mx), alpha = exp_fast(m[ii] - m_new);
        v16f acc = {};
        int64_t j = 0;
        for (; j + kLanes <= cnt; j += kLanes) {
          const v16f e = exp_fast(vec16::load16(s + j) * scale - m_new);
          acc += e;
          std::memcpy(s + j, &e, sizeof e);
        }
        if (j < cnt) {  // the last chunk whole: its lanes past cnt are exp(-inf) = 0
          const v16f e = exp_fast(lanes(s, cnt, j, scale) - m_new);
          acc += e;
          std::memcpy(s + j, &e, sizeof e);
          j += kLanes;
        }
        std::fill(s + j, s + Bc, 0.f);  // the row is now the tile row of P, zero past cnt
        l[ii] = l[ii] * alpha + hsum16(acc);
        m[ii] = m_new;
        if (p > 0.f) {
          bf16* pr = reinterpret_cast<bf16*>(Pt + ii * (Bc / 2));
          dropout_keep_bits(bits, seed, offset + uint64_t((bh * T + i) * T + j0), cnt, p);
          for (int64_t j = 0; j < cnt; ++j) pr[j] = dropped(s[j], kept(bits, j), p, inv_keep);
          std::fill(pr + cnt, pr + Bc, bf16{0});
        }
        float* o = O + ii * L.HSq;
        if (alpha != 1.f)  // the running max moved (times 1 changes nothing)
          for (int64_t d = 0; d < HS; ++d) o[d] *= alpha;
      }
      // Without dropout the tile's rows of P (rows of S, Bc apart as those of Pt) round in one go.
      if (p == 0.f) to_bf16(reinterpret_cast<bf16*>(Pt), S, ni * Bc);
      dot_bf16_gemm_rows(true, ni, HS, (nj + 1) / 2, Pt, Bc / 2, Vv, L.HSq, O, L.HSq);
    }
    for (int64_t ii = 0; ii < ni; ++ii) {
      float* o = O + ii * L.HSq;
      const float inv = 1.f / l[ii];
      for (int64_t d = 0; d < HS; ++d) o[d] *= inv;
      to_bf16(out.data() + (b * T + i0 + ii) * C + h * HS, o, HS);
      lse[bh * T + i0 + ii] = m[ii] + std::log(l[ii]);
    }
  }
}

void flash_attention_bf16_backward(std::span<bf16> dqkv, std::span<const bf16> dout, std::span<const bf16> qkv,
                                   std::span<const bf16> out, std::span<const float> lse, int64_t B, int64_t T,
                                   int64_t NH, int64_t KVH, int64_t HS, float p, uint64_t seed, uint64_t offset,
                                   std::span<float> workspace) {
  check_args(qkv.size(), dout.size(), lse.size(), B, T, NH, KVH, HS, p);
  const int64_t C = NH * HS, C3 = (NH + 2 * KVH) * HS, G = NH / KVH;
  REMAT_ASSERT(int64_t(out.size()) >= B * T * C, "flash_attention_bf16: out too small");
  REMAT_ASSERT(int64_t(dqkv.size()) >= B * T * C3, "flash_attention_bf16: dqkv too small");
  if (B * T == 0) return;
  const Layout L(T, HS);
  const float scale = 1.f / std::sqrt(float(HS));
  const float inv_keep = p > 0.f ? 1.f / (1.f - p) : 1.f;
  const int nthr = threads_for(kWho, workspace, L.total);
#pragma omp parallel for schedule(static) num_threads(nthr)
  for (int64_t bg = 0; bg < B * KVH; ++bg) {
    const int64_t b = bg / KVH, kvh = bg % KVH;
    float* ws = workspace.data() + L.total * omp_get_thread_num();
    auto words = [&](int64_t off) { return reinterpret_cast<bf16x2*>(ws + off); };
    bf16x2 *Qt = words(L.bqt), *dOt = words(L.dot), *Qv = words(L.qv), *dOv = words(L.dov), *KT = words(L.bkt),
           *VT = words(L.vt), *Kv = words(L.kv), *PdV = words(L.pdv), *dSV = words(L.dsv);
    bf16 *Pd = reinterpret_cast<bf16*>(ws + L.pd), *dSr = reinterpret_cast<bf16*>(ws + L.dsr);
    float *S = ws + L.bs, *dP = ws + L.dp, *dQ = ws + L.dq, *D = ws + L.d, *dKa = ws + L.dka, *dVa = ws + L.dva;
    uint64_t* bits = reinterpret_cast<uint64_t*>(ws + L.bits);
    const bf16* K = qkv.data() + b * T * C3 + (NH + kvh) * HS;
    const bf16* V = K + KVH * HS;
    pack_pairs_t(KT, L.Tp, K, C3, T, HS, L.Tq);
    pack_pairs_t(VT, L.Tp, V, C3, T, HS, L.Tq);
    pack_vnni(Kv, L.HSq, K, C3, T, HS, L.Tq, L.HSq);
    std::fill(dKa, dKa + L.HSq * L.Tp, 0.f);
    std::fill(dVa, dVa + L.HSq * L.Tp, 0.f);
    for (int64_t h = kvh * G; h < (kvh + 1) * G; ++h) {
      const int64_t bh = b * NH + h;
      const bf16* Q = qkv.data() + b * T * C3 + h * HS;
      const bf16* dO = dout.data() + b * T * C + h * HS;
      const bf16* Ob = out.data() + b * T * C + h * HS;
      for (int64_t i0 = 0; i0 < T; i0 += Br) {
        const int64_t ni = std::min(Br, T - i0), jend = i0 + ni, nip = (ni + 1) / 2 * 2;
        pack_pairs_rows(Qt, L.HSw, Q + i0 * C3, C3, ni, HS, ni);
        pack_pairs_rows(dOt, L.HSw, dO + i0 * C, C, ni, HS, ni);
        pack_vnni_t(Qv, Br / 2, Q + i0 * C3, C3, ni, HS, nip);
        pack_vnni_t(dOv, Br / 2, dO + i0 * C, C, ni, HS, nip);
        // D_i = dO_i . O_i = sum_j P_ij dP_ij (the softmax backward's row term), in fp32.
        // In 16 lanes and a fixed tree (the tail zero-padded).
        for (int64_t ii = 0; ii < ni; ++ii) {
          const bf16 *g = dO + (i0 + ii) * C, *o = Ob + (i0 + ii) * C;
          v16f acc = {};
          int64_t d = 0;
          for (; d + kLanes <= HS; d += kLanes) acc += vec_bf16::load16(g + d) * vec_bf16::load16(o + d);
          if (d < HS) acc += vec_bf16::load_tail(g + d, HS - d) * vec_bf16::load_tail(o + d, HS - d);
          D[ii] = hsum16(acc);
        }
        std::fill(dQ, dQ + ni * L.HSq, 0.f);
        for (int64_t j0 = 0; j0 < jend; j0 += Bc) {
          const int64_t nj = std::min(Bc, jend - j0), njq = round16(nj);
          // S = Q K^T and dPd = dO V^T for the tile.
          dot_bf16_gemm_rows(false, ni, njq, L.HSw, Qt, L.HSw, KT + j0, L.Tp, S, Bc);
          dot_bf16_gemm_rows(false, ni, njq, L.HSw, dOt, L.HSw, VT + j0, L.Tp, dP, Bc);
          for (int64_t ii = 0; ii < ni; ++ii) {
            const int64_t i = i0 + ii, cnt = std::min(nj, i - j0 + 1);
            const float li = lse[bh * T + i], Di = D[ii];
            float* s = S + ii * Bc;   // -> P
            float* dp = dP + ii * Bc;  // -> dS
            bf16* pd = Pd + ii * Bc;
            bf16* ds = dSr + ii * Bc;
            int64_t j = 0;
            for (; j + kLanes <= cnt; j += kLanes) {
              const v16f P = exp_fast(vec16::load16(s + j) * scale - li);
              std::memcpy(s + j, &P, sizeof P);
            }
            if (j < cnt) {
              const v16f P = exp_fast(lanes(s, cnt, j, scale) - li);
              for (int64_t k = 0; j + k < cnt; ++k) s[j + k] = P[k];
            }
            if (p > 0.f) {
              dropout_keep_bits(bits, seed, offset + uint64_t((bh * T + i) * T + j0), cnt, p);
              for (int64_t j = 0; j < cnt; ++j) {
                const bool keep = kept(bits, j);
                pd[j] = dropped(s[j], keep, p, inv_keep);
                dp[j] = keep ? dp[j] * inv_keep : 0.f;
              }
            } else {
              to_bf16(pd, s, cnt);
            }
            for (int64_t j = 0; j < cnt; ++j) dp[j] = s[j] * scale * (dp[j] - Di);
            to_bf16(ds, dp, cnt);
            std::fill(pd + cnt, pd + Bc, bf16{0});
            std::fill(ds + cnt, ds + Bc, bf16{0});
          }
          for (int64_t ii = ni; ii < nip; ++ii) {  // the pad row of an odd tile
            std::fill(Pd + ii * Bc, Pd + (ii + 1) * Bc, bf16{0});
            std::fill(dSr + ii * Bc, dSr + (ii + 1) * Bc, bf16{0});
          }
          for (int64_t ip = 0; ip < nip / 2; ++ip)
            for (int64_t j = 0; j < Bc; ++j) {
              PdV[ip * Bc + j] = pair(Pd[2 * ip * Bc + j], Pd[(2 * ip + 1) * Bc + j]);
              dSV[ip * Bc + j] = pair(dSr[2 * ip * Bc + j], dSr[(2 * ip + 1) * Bc + j]);
            }
          // dQ += dS K;  dV[j] += sum_i Pd[i][j] dO[i];  dK[j] += sum_i dS[i][j] Q[i]  (scale in dS).
          dot_bf16_gemm_rows(true, ni, HS, (nj + 1) / 2, reinterpret_cast<const bf16x2*>(dSr), Bc / 2, Kv + j0 / 2 * L.HSq, L.HSq, dQ,
                             L.HSq);
          // Transposed: dV^T += dO^T Pd, dK^T += Q^T dS (rows of dO^T and Q^T contiguous).
          dot_bf16_gemm_rows(true, HS, nj, nip / 2, dOv, Br / 2, PdV, Bc, dVa + j0, L.Tp);
          dot_bf16_gemm_rows(true, HS, nj, nip / 2, Qv, Br / 2, dSV, Bc, dKa + j0, L.Tp);
        }
        for (int64_t ii = 0; ii < ni; ++ii)
          add_row(dqkv.data() + b * T * C3 + (i0 + ii) * C3 + h * HS, dQ + ii * L.HSq, HS);
      }
    }
    add_transposed(dqkv.data() + b * T * C3 + (NH + kvh) * HS, C3, dKa, L.Tp, T, HS);
    add_transposed(dqkv.data() + b * T * C3 + (NH + KVH + kvh) * HS, C3, dVa, L.Tp, T, HS);
  }
}

}  // namespace remat::kernels
