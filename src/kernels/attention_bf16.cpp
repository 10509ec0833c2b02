// Naive causal attention on bf16: see attention_bf16.h. Products on the bf16 pair kernels
// (dot_bf16_gemm_rows, dot_bf16.h: AMX tiles where the CPU has them), operands packed as pack_bf16.h
// describes: every A operand has its pairs contiguous along rows (the backward's dK and dV are
// accumulated transposed, dK^T += Q^T dS, so that Q^T and dO^T are the row operands).
#include "kernels/attention_bf16.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "kernels/attention_common.h"
#include "kernels/attention_tile.h"
#include "kernels/dot_bf16.h"
#include "kernels/exp_fast.h"
#include "kernels/pack_bf16.h"
#include "kernels/vec16.h"

namespace remat::kernels {
namespace {

using namespace pack_bf16;

constexpr int64_t kRB = 64;  // queries per tile; a multiple of 16
using attention_common::check_heads;
using attention_common::round16;
using attention_common::threads_for;
constexpr const char* kWho = "attention_bf16";  // the messages' and the workspace function's name

// Per-thread workspace, in 4-byte units. Tq = round16(T) + 16 keys (columns of S; the 16 past the
// last multiple of 16 keep rows a power of two apart from mapping a tile's 16 rows to a few L1
// sets), HSw = ceil(HS/2) pair words per head row, HSq = round16(HS).
//   forward:  KT [HSw x Tq] pairs_t(K) | Vv [Tq/2 x HSq] vnni(V) | Qt [kRB x HSw] | S [kRB x Tq] f32 |
//             Pd [kRB x Tq/2] pairs | Ot [kRB x HSq] f32 | bits
//   backward: VT [HSw x Tq] pairs_t(V) | Kv [Tq/2 x HSq] vnni(K) | dKa, dVa [HSq x Tq] f32 (transposed) |
//             dOt [kRB x HSw] | Qv, dOv [HSq x kRB/2] vnni_t | dS [kRB x Tq] f32 | PdV, dSV [kRB/2 x Tq] vnni |
//             dSp [kRB x Tq/2] pairs | dQt [kRB x HSq] f32 | Pdr [kRB x Tq] bf16 (dropped probs) |
//             row [Tq] f32 | bits
struct Layout {
  int64_t Tq, HSw, HSq;
  int64_t kt, vv, qt, s, pd, ot;                                      // forward
  int64_t vt, kv, dka, dva, dot, qv, dov, ds, pdv, dsv, dsp, dqt, pdr, row;  // backward
  int64_t bits, total;
  Layout(int64_t T, int64_t HS) : Tq(round16(T) + 16), HSw((HS + 1) / 2), HSq(round16(HS)) {
    auto r16 = round16;
    kt = 0;
    vv = kt + r16(HSw * Tq);
    qt = vv + r16(Tq / 2 * HSq);
    s = qt + r16(kRB * HSw);
    pd = s + kRB * Tq;
    ot = pd + kRB * Tq / 2;
    const int64_t fwd_end = ot + kRB * HSq;
    vt = 0;
    kv = vt + r16(HSw * Tq);
    dka = kv + r16(Tq / 2 * HSq);
    dva = dka + Tq * HSq;
    dot = dva + Tq * HSq;
    qv = dot + r16(kRB * HSw);
    dov = qv + kRB / 2 * HSq;
    ds = dov + kRB / 2 * HSq;
    pdv = ds + kRB * Tq;
    dsv = pdv + kRB / 2 * Tq;
    dsp = dsv + kRB / 2 * Tq;
    dqt = dsp + kRB * Tq / 2;
    pdr = dqt + kRB * HSq;
    row = pdr + kRB * Tq / 2;
    const int64_t bwd_end = row + Tq;
    bits = std::max(fwd_end, bwd_end);
    total = bits + r16(2 * ((T + 63) / 64));
  }
};

// Causal softmax of one row of scores (fp32, unscaled: s_j = scale * S[j], j < n) into the bf16
// probability row P[0..T), zeros past n; S (round16(T) floats) is overwritten. 16 lanes (the tail
// padded with -inf, whose exp is 0), a fixed tree: independent of the ISA path and of the thread.
void softmax_row(bf16* P, float* S, int64_t n, int64_t T, float scale) {
  using vec16::kLanes;
  using vec16::v16f;
  // Lanes j..n-1 scaled, -inf after (j < n, so the row's round16(T) floats cover the 16 lanes; those
  // past n are read, whatever they hold, and replaced).
  typedef int32_t v16i __attribute__((vector_size(64)));
  const v16i lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  const v16f ninf = v16f{} - INFINITY;
  auto tail = [&](int64_t j) { return lane < v16i{} + int32_t(n - j) ? vec16::load16(S + j) * scale : ninf; };
  const int64_t nf = n / kLanes * kLanes;  // full chunks
  v16f vm = nf < n ? tail(nf) : ninf;
  for (int64_t j = 0; j < nf; j += kLanes) {
    const v16f v = vec16::load16(S + j) * scale;
    vm = v > vm ? v : vm;
  }
  const float mx = hmax16(vm);
  v16f acc = {};
  for (int64_t j = 0; j < nf; j += kLanes) {
    const v16f e = exp_fast(vec16::load16(S + j) * scale - mx);
    std::memcpy(S + j, &e, sizeof e);
    acc += e;
  }
  if (nf < n) {
    const v16f e = exp_fast(tail(nf) - mx);
    for (int64_t k = 0; nf + k < n; ++k) S[nf + k] = e[k];
    acc += e;
  }
  const float inv = 1.0f / hsum16(acc);
  for (int64_t j = 0; j < n; ++j) S[j] *= inv;
  to_bf16(P, S, n);
  std::fill(P + n, P + T, bf16{0});
}

// Probability rows i0..i0+ni-1 of one head: S = Q K^T per group of 16 queries over the keys the
// group needs, then the causal softmax of each row into probs (row stride T). Qt and KT packed.
void probs_tile(bf16* probs, int64_t T, const bf16x2* Qt, const bf16x2* KT, float* S, const Layout& L, int64_t i0,
                int64_t ni, float scale) {
  for (int64_t g0 = 0; g0 < ni; g0 += 16) {
    const int64_t gm = std::min<int64_t>(16, ni - g0);
    const int64_t n_end = std::min(L.Tq, round16(i0 + g0 + gm));
    dot_bf16_gemm_rows(false, gm, n_end, L.HSw, Qt + g0 * L.HSw, L.HSw, KT, L.Tq, S + g0 * L.Tq, L.Tq);
  }
  for (int64_t ii = 0; ii < ni; ++ii) softmax_row(probs + ii * T, S + ii * L.Tq, i0 + ii + 1, T, scale);
}

void check_args(size_t qkv, size_t out, size_t probs, int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HS,
                float p) {
  check_heads(kWho, NH, KVH, HS);
  REMAT_ASSERT(int64_t(qkv) >= B * T * (NH + 2 * KVH) * HS, "attention_bf16: qkv too small");
  REMAT_ASSERT(int64_t(out) >= B * T * NH * HS, "attention_bf16: out / dout too small");
  REMAT_ASSERT(int64_t(probs) >= B * NH * T * T, "attention_bf16: probs too small");
  REMAT_ASSERT(p >= 0.f && p < 1.f, "attention_bf16: dropout p must be in [0, 1)");
}

}  // namespace

int64_t attention_bf16_workspace_floats(int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HS, int64_t threads) {
  check_heads(kWho, NH, KVH, HS);
  return std::max<int64_t>(threads, 1) * Layout(T, HS).total;
}

namespace {
// The forward, with or without P V (probs_only: selective recompute).
void forward(bf16* out, bf16* probs, const bf16* qkv, int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HS,
             float p, uint64_t seed, uint64_t offset, std::span<float> workspace, bool probs_only) {
  const int64_t C = NH * HS, C3 = (NH + 2 * KVH) * HS, G = NH / KVH;
  const Layout L(T, HS);
  const float scale = 1.f / std::sqrt(float(HS));
  const float inv_keep = p > 0.f ? 1.f / (1.f - p) : 1.f;
  const int nthr = threads_for(kWho, workspace, L.total);
#pragma omp parallel for schedule(static) num_threads(nthr)
  for (int64_t bh = 0; bh < B * NH; ++bh) {
    const int64_t b = bh / NH, h = bh % NH;
    float* ws = workspace.data() + L.total * omp_get_thread_num();
    bf16x2* KT = reinterpret_cast<bf16x2*>(ws + L.kt);
    bf16x2* Vv = reinterpret_cast<bf16x2*>(ws + L.vv);
    bf16x2* Qt = reinterpret_cast<bf16x2*>(ws + L.qt);
    float* S = ws + L.s;
    bf16x2* Pd = reinterpret_cast<bf16x2*>(ws + L.pd);
    float* Ot = ws + L.ot;
    uint64_t* bits = reinterpret_cast<uint64_t*>(ws + L.bits);
    const bf16* Q = qkv + b * T * C3 + h * HS;
    const bf16* K = qkv + b * T * C3 + (NH + h / G) * HS;
    const bf16* V = K + KVH * HS;
    pack_pairs_t(KT, L.Tq, K, C3, T, HS, L.Tq);
    if (!probs_only) pack_vnni(Vv, L.HSq, V, C3, T, HS, L.Tq, L.HSq);
    for (int64_t i0 = 0; i0 < T; i0 += kRB) {
      const int64_t ni = std::min(kRB, T - i0), jend = i0 + ni, jpad = (jend + 1) / 2 * 2;
      bf16* P = probs + (bh * T + i0) * T;
      pack_pairs_rows(Qt, L.HSw, Q + i0 * C3, C3, ni, HS, ni);
      probs_tile(P, T, Qt, KT, S, L, i0, ni, scale);
      if (probs_only) continue;
      // A = Pd as bf16 pairs along keys, zero from the diagonal to the tile's even end. Without
      // dropout that is P itself, read in place when its rows are whole words (the forward wrote the
      // upper triangle as zeros, and the tile's keys end within the row when T is even).
      const bf16x2* A = reinterpret_cast<const bf16x2*>(P);
      int64_t lda = T / 2;
      if (p > 0.f || T % 2 != 0 || reinterpret_cast<uintptr_t>(P) % 4 != 0) {
        A = Pd;
        lda = L.Tq / 2;
        for (int64_t ii = 0; ii < ni; ++ii) {
          const int64_t i = i0 + ii, n = i + 1;
          bf16* d = reinterpret_cast<bf16*>(Pd + ii * (L.Tq / 2));
          if (p > 0.f) {
            dropout_keep_bits(bits, seed, offset + uint64_t((bh * T + i) * T), n, p);
            for (int64_t j = 0; j < n; ++j) d[j] = dropped(P[ii * T + j], kept(bits, j), p, inv_keep);
          } else {
            std::copy(P + ii * T, P + ii * T + n, d);
          }
          std::fill(d + n, d + jpad, bf16{0});
        }
      }
      // O = Pd V, per group of 16 queries over the keys it needs.
      for (int64_t g0 = 0; g0 < ni; g0 += 16) {
        const int64_t gm = std::min<int64_t>(16, ni - g0), kp = (i0 + g0 + gm + 1) / 2;
        dot_bf16_gemm_rows(false, gm, HS, kp, A + g0 * lda, lda, Vv, L.HSq, Ot + g0 * L.HSq, L.HSq);
      }
      for (int64_t ii = 0; ii < ni; ++ii) to_bf16(out + (b * T + i0 + ii) * C + h * HS, Ot + ii * L.HSq, HS);
    }
  }
}
}  // namespace

void attention_bf16_forward(std::span<bf16> out, std::span<bf16> probs, std::span<const bf16> qkv, int64_t B,
                            int64_t T, int64_t NH, int64_t KVH, int64_t HS, float p, uint64_t seed, uint64_t offset,
                            std::span<float> workspace) {
  check_args(qkv.size(), out.size(), probs.size(), B, T, NH, KVH, HS, p);
  if (B * T == 0) return;
  forward(out.data(), probs.data(), qkv.data(), B, T, NH, KVH, HS, p, seed, offset, workspace, false);
}

void attention_bf16_probs_forward(std::span<bf16> probs, std::span<const bf16> qkv, int64_t B, int64_t T, int64_t NH,
                                  int64_t KVH, int64_t HS, std::span<float> workspace) {
  check_heads(kWho, NH, KVH, HS);
  REMAT_ASSERT(int64_t(qkv.size()) >= B * T * (NH + 2 * KVH) * HS, "attention_bf16: qkv too small");
  REMAT_ASSERT(int64_t(probs.size()) >= B * NH * T * T, "attention_bf16: probs too small");
  if (B * T == 0) return;
  forward(nullptr, probs.data(), qkv.data(), B, T, NH, KVH, HS, 0.f, 0, 0, workspace, true);
}

void attention_bf16_backward(std::span<bf16> dqkv, std::span<const bf16> dout, std::span<const bf16> qkv,
                             std::span<const bf16> probs, int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HS,
                             float p, uint64_t seed, uint64_t offset, std::span<float> workspace) {
  check_args(qkv.size(), dout.size(), probs.size(), B, T, NH, KVH, HS, p);
  const int64_t C = NH * HS, C3 = (NH + 2 * KVH) * HS, G = NH / KVH;
  REMAT_ASSERT(int64_t(dqkv.size()) >= B * T * C3, "attention_bf16: dqkv too small");
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
    bf16x2 *VT = words(L.vt), *Kv = words(L.kv), *dOt = words(L.dot), *Qv = words(L.qv), *dOv = words(L.dov);
    bf16x2 *PdV = words(L.pdv), *dSV = words(L.dsv), *dSp = words(L.dsp);
    bf16* Pdr = reinterpret_cast<bf16*>(ws + L.pdr);
    float *dKa = ws + L.dka, *dVa = ws + L.dva, *dS = ws + L.ds, *dQt = ws + L.dqt, *row = ws + L.row;
    uint64_t* bits = reinterpret_cast<uint64_t*>(ws + L.bits);
    const bf16* K = qkv.data() + b * T * C3 + (NH + kvh) * HS;
    const bf16* V = K + KVH * HS;
    bf16* dK = dqkv.data() + b * T * C3 + (NH + kvh) * HS;
    bf16* dV = dK + KVH * HS;
    pack_pairs_t(VT, L.Tq, V, C3, T, HS, L.Tq);
    pack_vnni(Kv, L.HSq, K, C3, T, HS, L.Tq, L.HSq);
    std::fill(dKa, dKa + L.HSq * L.Tq, 0.f);
    std::fill(dVa, dVa + L.HSq * L.Tq, 0.f);
    for (int64_t h = kvh * G; h < (kvh + 1) * G; ++h) {
      const int64_t bh = b * NH + h;
      const bf16* Q = qkv.data() + b * T * C3 + h * HS;
      const bf16* dO = dout.data() + b * T * C + h * HS;
      bf16* dQ = dqkv.data() + b * T * C3 + h * HS;
      for (int64_t i0 = 0; i0 < T; i0 += kRB) {
        const int64_t ni = std::min(kRB, T - i0), jend = i0 + ni, jpad = (jend + 1) / 2 * 2;
        const int64_t nip = (ni + 1) / 2 * 2;  // query rows padded to a pair
        const bf16* P = probs.data() + (bh * T + i0) * T;
        pack_pairs_rows(dOt, L.HSw, dO + i0 * C, C, ni, HS, ni);
        pack_vnni_t(Qv, kRB / 2, Q + i0 * C3, C3, ni, HS, nip);
        pack_vnni_t(dOv, kRB / 2, dO + i0 * C, C, ni, HS, nip);
        // Forward: out = Pd V  =>  dPd = dO V^T (into dS), per group of 16 queries.
        for (int64_t g0 = 0; g0 < ni; g0 += 16) {
          const int64_t gm = std::min<int64_t>(16, ni - g0);
          const int64_t n_end = std::min(L.Tq, round16(i0 + g0 + gm));
          dot_bf16_gemm_rows(false, gm, n_end, L.HSw, dOt + g0 * L.HSw, L.HSw, VT, L.Tq, dS + g0 * L.Tq, L.Tq);
        }
        // Forward: P = softmax(S)  =>  dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik) * scale, with
        // dP = dPd * keep / (1-p). dS is rounded to bf16 (rows of dSp) for dQ and dK; Pd (for dV) is P
        // itself without dropout, else rows of Pdr.
        for (int64_t ii = 0; ii < ni; ++ii) {
          const int64_t i = i0 + ii, n = i + 1;
          const bf16* pr = P + ii * T;
          float* sr = dS + ii * L.Tq;
          float* pf = row;
          to_float(pf, pr, n);
          if (p > 0.f) {
            bf16* dr = Pdr + ii * L.Tq;
            dropout_keep_bits(bits, seed, offset + uint64_t((bh * T + i) * T), n, p);
            for (int64_t j = 0; j < n; ++j) {
              const bool keep = kept(bits, j);
              dr[j] = dropped(pr[j], keep, p, inv_keep);
              sr[j] = keep ? sr[j] * inv_keep : 0.f;
            }
            std::fill(dr + n, dr + jpad, bf16{0});
          }
          // d = sum_j P_j dP_j in 16 lanes and a fixed tree (tail zero-padded).
          vec16::v16f acc = {};
          int64_t j = 0;
          for (; j + vec16::kLanes <= n; j += vec16::kLanes) acc += vec16::load16(pf + j) * vec16::load16(sr + j);
          acc += vec16::load_tail(pf + j, n - j) * vec16::load_tail(sr + j, n - j);
          const float d = hsum16(acc);
          for (int64_t k = 0; k < n; ++k) sr[k] = pf[k] * scale * (sr[k] - d);
          bf16* sp = reinterpret_cast<bf16*>(dSp + ii * (L.Tq / 2));
          to_bf16(sp, sr, n);
          std::fill(sp + n, sp + jpad, bf16{0});
        }
        // The vnni operands of dV and dK: rows of Pd and dS interleaved in pairs (a missing odd row
        // and the keys past a row's diagonal are zeros).
        for (int64_t ip = 0; ip < nip / 2; ++ip) {
          const int64_t r0 = 2 * ip, r1 = 2 * ip + 1;
          const bf16* s0 = reinterpret_cast<const bf16*>(dSp + r0 * (L.Tq / 2));
          const bf16* s1 = reinterpret_cast<const bf16*>(dSp + r1 * (L.Tq / 2));
          const bf16* p0 = p > 0.f ? Pdr + r0 * L.Tq : P + r0 * T;
          const bf16* p1 = p > 0.f ? Pdr + r1 * L.Tq : P + r1 * T;
          // Each row is zero from its diagonal to jpad (the forward wrote P's upper triangle as zeros;
          // Pdr and dSp are zero-filled above), so whole rows interleave with no mask.
          bf16x2* pv = PdV + ip * L.Tq;
          bf16x2* sv = dSV + ip * L.Tq;
          if (r1 < ni) {
            for (int64_t j = 0; j < jend; ++j) pv[j] = pair(p0[j], p1[j]);
            for (int64_t j = 0; j < jend; ++j) sv[j] = pair(s0[j], s1[j]);
          } else {
            for (int64_t j = 0; j < jend; ++j) pv[j] = p0[j].bits;
            for (int64_t j = 0; j < jend; ++j) sv[j] = s0[j].bits;
          }
          for (int64_t j = jend; j < jpad; ++j) pv[j] = sv[j] = 0;  // past every row's diagonal
        }
        // dQ_i = dS K (fresh, fp32), added to the bf16 dqkv once.
        for (int64_t g0 = 0; g0 < ni; g0 += 16) {
          const int64_t gm = std::min<int64_t>(16, ni - g0), kp = (i0 + g0 + gm + 1) / 2;
          dot_bf16_gemm_rows(false, gm, HS, kp, dSp + g0 * (L.Tq / 2), L.Tq / 2, Kv, L.HSq, dQt + g0 * L.HSq, L.HSq);
        }
        for (int64_t ii = 0; ii < ni; ++ii) {
          bf16* q = dQ + (i0 + ii) * C3;
          float t[256];
          for (int64_t d0 = 0; d0 < HS; d0 += 256) {
            const int64_t len = std::min<int64_t>(256, HS - d0);
            for (int64_t k = 0; k < len; ++k) t[k] = bf16_to_float(q[d0 + k]) + dQt[ii * L.HSq + d0 + k];
            to_bf16(q + d0, t, len);
          }
        }
        // dV[j] += sum_i Pd[i][j] dO[i];  dK[j] += sum_i dS[i][j] Q[i]  (scale already in dS), fp32,
        // transposed (dV^T += dO^T Pd) so that the operand with contiguous rows is dO^T (Q^T).
        dot_bf16_gemm_rows(true, HS, jend, nip / 2, dOv, kRB / 2, PdV, L.Tq, dVa, L.Tq);
        dot_bf16_gemm_rows(true, HS, jend, nip / 2, Qv, kRB / 2, dSV, L.Tq, dKa, L.Tq);
      }
    }
    add_transposed(dK, C3, dKa, L.Tq, T, HS);
    add_transposed(dV, C3, dVa, L.Tq, T, HS);
  }
}

}  // namespace remat::kernels
