#include "kernels/rope.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/error.h"
#include "kernels/vec_bf16.h"

namespace remat::kernels {

namespace {

using vec_bf16::chunk_out;
using vec_bf16::kChunk;
using vec_bf16::store;
using vec_bf16::widen;
constexpr int64_t kPairs = kChunk / 2;  // pairs per chunk (a head of HS <= 1024 in one go)

// One head, pairs [0, H): the rotation of the forward, o = R x (o must not alias x).
template <class S>
void rotate_head(S* o, const S* x, const float* c, const float* s, int64_t H) {
  for (int64_t i0 = 0; i0 < H; i0 += kPairs) {
    const int64_t len = std::min(kPairs, H - i0);
    float lo_buf[kPairs], hi_buf[kPairs];
    float* __restrict lo = chunk_out(o + i0, lo_buf);
    float* __restrict hi = chunk_out(o + i0 + H, hi_buf);
    for (int64_t i = 0; i < len; ++i) {
      const float a = widen(x[i0 + i]), b = widen(x[i0 + i + H]);
      lo[i] = a * c[i0 + i] - b * s[i0 + i];
      hi[i] = b * c[i0 + i] + a * s[i0 + i];
    }
    store(o + i0, lo, len);
    store(o + i0 + H, hi, len);
  }
}
// Its transpose added to the gradient: dx += R^T dy.
template <class S>
void rotate_head_back_add(S* dx, const S* dy, const float* c, const float* s, int64_t H) {
  for (int64_t i0 = 0; i0 < H; i0 += kPairs) {
    const int64_t len = std::min(kPairs, H - i0);
    float lo_buf[kPairs], hi_buf[kPairs];
    float* lo = chunk_out(dx + i0, lo_buf);
    float* hi = chunk_out(dx + i0 + H, hi_buf);
    for (int64_t i = 0; i < len; ++i) {
      const float a = widen(dy[i0 + i]), b = widen(dy[i0 + i + H]);
      lo[i] = widen(dx[i0 + i]) + (a * c[i0 + i] + b * s[i0 + i]);
      hi[i] = widen(dx[i0 + i + H]) + (b * c[i0 + i] - a * s[i0 + i]);
    }
    store(dx + i0, lo, len);
    store(dx + i0 + H, hi, len);
  }
}
// dx[0, n) += dy[0, n) (the v part of the backward).
template <class S>
void add_row(S* dx, const S* dy, int64_t n) {
  for (int64_t j0 = 0; j0 < n; j0 += kChunk) {
    const int64_t len = std::min(kChunk, n - j0);
    float buf[kChunk];
    float* t = chunk_out(dx + j0, buf);
    for (int64_t j = 0; j < len; ++j) t[j] = widen(dx[j0 + j]) + widen(dy[j0 + j]);
    store(dx + j0, t, len);
  }
}

// The qkv layout of one token: q heads (NH*HS), k heads (KVH*HS), v heads (KVH*HS); H pairs per head.
struct Layout {
  int64_t H, QC, KC, C3;
  Layout(int64_t NH, int64_t KVH, int64_t HS) : H(HS / 2), QC(NH * HS), KC(KVH * HS), C3(QC + 2 * KC) {}
};

// For each token bt of B*T, in parallel: fn(bt, cos row, sin row) with the tables' row t = bt % T.
template <class F>
void for_tokens(int64_t B, int64_t T, int64_t H, std::span<const float> cos, std::span<const float> sin, F&& fn) {
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const int64_t t = bt % T;
    fn(bt, cos.data() + t * H, sin.data() + t * H);
  }
}

// The check every RoPE function makes (`who`: the public function, in scope).
#define REMAT_ROPE_CHECK_HS(HS) \
  REMAT_ASSERT_IN(who, (HS) % 2 == 0, "head size HS must be even (RoPE rotates pairs (x[i], x[i+HS/2]))")

}  // namespace

void rope_table(std::span<float> cos, std::span<float> sin, int64_t T, int64_t HS, float theta) {
  const char* who = "rope_table";
  REMAT_ROPE_CHECK_HS(HS);
  const int64_t H = HS / 2;
  REMAT_ASSERT_IN(who, int64_t(cos.size()) >= T * H && int64_t(sin.size()) >= T * H, "span too small");
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < H; ++i) {
      // In double, then rounded once: accurate to ~1 float ulp even at large t (Hugging Face forms
      // t * inv_freq in fp32, which loses low bits of the angle as t grows). Built once per run.
      const double angle = double(t) * std::pow(double(theta), -2.0 * double(i) / double(HS));
      cos[t * H + i] = float(std::cos(angle));
      sin[t * H + i] = float(std::sin(angle));
    }
}

template <class S>
void rope_qkv_forward(std::span<S> qkv, std::span<const S> q, std::span<const S> k, std::span<const S> v,
                      std::span<const float> cos, std::span<const float> sin, int64_t B, int64_t T, int64_t NH,
                      int64_t KVH, int64_t HS) {
  const char* who = "rope_qkv_forward";
  REMAT_ROPE_CHECK_HS(HS);
  const Layout L(NH, KVH, HS);
  const int64_t BT = B * T;
  REMAT_ASSERT_IN(who,
                  int64_t(qkv.size()) >= BT * L.C3 && int64_t(q.size()) >= BT * L.QC &&
                      int64_t(k.size()) >= BT * L.KC && int64_t(v.size()) >= BT * L.KC &&
                      int64_t(cos.size()) >= T * L.H && int64_t(sin.size()) >= T * L.H,
                  "span too small (or tables shorter than T)");
  for_tokens(B, T, L.H, cos, sin, [&](int64_t bt, const float* c, const float* s) {
    S* o = qkv.data() + bt * L.C3;
    const S* xq = q.data() + bt * L.QC;
    const S* xk = k.data() + bt * L.KC;
    for (int64_t h = 0; h < NH; ++h) rotate_head(o + h * HS, xq + h * HS, c, s, L.H);
    for (int64_t h = 0; h < KVH; ++h) rotate_head(o + L.QC + h * HS, xk + h * HS, c, s, L.H);
    std::memcpy(o + L.QC + L.KC, v.data() + bt * L.KC, size_t(L.KC) * sizeof(S));  // v: bit for bit
  });
}

// forward was: qkv_q = R q, qkv_k = R k (R orthogonal, per pair), qkv_v = v, so
//   dq += R^T dqkv_q, dk += R^T dqkv_k, dv += dqkv_v. An empty dq/dk/dv is skipped.
template <class S>
void rope_qkv_backward(std::span<S> dq, std::span<S> dk, std::span<S> dv, std::span<const S> dqkv,
                       std::span<const float> cos, std::span<const float> sin, int64_t B, int64_t T, int64_t NH,
                       int64_t KVH, int64_t HS) {
  const char* who = "rope_qkv_backward";
  REMAT_ROPE_CHECK_HS(HS);
  const Layout L(NH, KVH, HS);
  const int64_t BT = B * T;
  const bool want_q = !dq.empty(), want_k = !dk.empty(), want_v = !dv.empty();
  REMAT_ASSERT_IN(who,
                  int64_t(dqkv.size()) >= BT * L.C3 && (!want_q || int64_t(dq.size()) >= BT * L.QC) &&
                      (!want_k || int64_t(dk.size()) >= BT * L.KC) && (!want_v || int64_t(dv.size()) >= BT * L.KC) &&
                      int64_t(cos.size()) >= T * L.H && int64_t(sin.size()) >= T * L.H,
                  "span too small (or tables shorter than T)");
  for_tokens(B, T, L.H, cos, sin, [&](int64_t bt, const float* c, const float* s) {
    const S* g = dqkv.data() + bt * L.C3;
    if (want_q)
      for (int64_t h = 0; h < NH; ++h) rotate_head_back_add(dq.data() + bt * L.QC + h * HS, g + h * HS, c, s, L.H);
    if (want_k)
      for (int64_t h = 0; h < KVH; ++h)
        rotate_head_back_add(dk.data() + bt * L.KC + h * HS, g + L.QC + h * HS, c, s, L.H);
    if (want_v) add_row(dv.data() + bt * L.KC, g + L.QC + L.KC, L.KC);
  });
}

#define REMAT_ROPE_INSTANTIATE(S)                                                                                     \
  template void rope_qkv_forward(std::span<S>, std::span<const S>, std::span<const S>, std::span<const S>,            \
                                 std::span<const float>, std::span<const float>, int64_t, int64_t, int64_t, int64_t,  \
                                 int64_t);                                                                            \
  template void rope_qkv_backward(std::span<S>, std::span<S>, std::span<S>, std::span<const S>,                       \
                                  std::span<const float>, std::span<const float>, int64_t, int64_t, int64_t, int64_t, \
                                  int64_t);
REMAT_ROPE_INSTANTIATE(float)
REMAT_ROPE_INSTANTIATE(bf16)

}  // namespace remat::kernels
