#include "kernels/rope_bf16.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "kernels/vec_bf16.h"

namespace remat::kernels {

namespace {

using vec_bf16::kChunk;
constexpr int64_t kPairs = kChunk / 2;  // pairs per stack buffer (a head of HS <= 1024 in one go)

// One head, pairs [0, H): rope.cpp's rotation (forward), or its transpose added to the gradient
// (backward), in fp32 on a stack buffer, each half narrowed once.
void rotate_head(bf16* o, const bf16* x, const float* c, const float* s, int64_t H) {
  for (int64_t i0 = 0; i0 < H; i0 += kPairs) {
    const int64_t len = std::min(kPairs, H - i0);
    float lo[kPairs], hi[kPairs];
    for (int64_t i = 0; i < len; ++i) {
      const float a = bf16_to_float(x[i0 + i]), b = bf16_to_float(x[i0 + i + H]);
      lo[i] = a * c[i0 + i] - b * s[i0 + i];
      hi[i] = b * c[i0 + i] + a * s[i0 + i];
    }
    to_bf16(o + i0, lo, len);
    to_bf16(o + i0 + H, hi, len);
  }
}
void rotate_head_back_add(bf16* dx, const bf16* dy, const float* c, const float* s, int64_t H) {
  for (int64_t i0 = 0; i0 < H; i0 += kPairs) {
    const int64_t len = std::min(kPairs, H - i0);
    float lo[kPairs], hi[kPairs];
    for (int64_t i = 0; i < len; ++i) {
      const float a = bf16_to_float(dy[i0 + i]), b = bf16_to_float(dy[i0 + i + H]);
      lo[i] = bf16_to_float(dx[i0 + i]) + (a * c[i0 + i] + b * s[i0 + i]);
      hi[i] = bf16_to_float(dx[i0 + i + H]) + (b * c[i0 + i] - a * s[i0 + i]);
    }
    to_bf16(dx + i0, lo, len);
    to_bf16(dx + i0 + H, hi, len);
  }
}
// dx[0, n) += dy[0, n) (the v part of the backward).
void add_row(bf16* dx, const bf16* dy, int64_t n) {
  for (int64_t j0 = 0; j0 < n; j0 += kChunk) {
    const int64_t len = std::min(kChunk, n - j0);
    float t[kChunk];
    for (int64_t j = 0; j < len; ++j) t[j] = bf16_to_float(dx[j0 + j]) + bf16_to_float(dy[j0 + j]);
    to_bf16(dx + j0, t, len);
  }
}

}  // namespace

void rope_qkv_bf16_forward(std::span<bf16> qkv, std::span<const bf16> q, std::span<const bf16> k,
                           std::span<const bf16> v, std::span<const float> cos, std::span<const float> sin,
                           int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HS) {
  REMAT_ASSERT(HS % 2 == 0,
               "rope_qkv_bf16_forward: head size HS must be even (RoPE rotates pairs (x[i], x[i+HS/2]))");
  const int64_t H = HS / 2, QC = NH * HS, KC = KVH * HS, C3 = QC + 2 * KC;
  REMAT_ASSERT(int64_t(qkv.size()) >= B * T * C3 && int64_t(q.size()) >= B * T * QC &&
                   int64_t(k.size()) >= B * T * KC && int64_t(v.size()) >= B * T * KC &&
                   int64_t(cos.size()) >= T * H && int64_t(sin.size()) >= T * H,
               "rope_qkv_bf16_forward: span too small (or tables shorter than T)");
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const int64_t t = bt % T;
    const float* c = cos.data() + t * H;
    const float* s = sin.data() + t * H;
    bf16* o = qkv.data() + bt * C3;
    const bf16* xq = q.data() + bt * QC;
    const bf16* xk = k.data() + bt * KC;
    for (int64_t h = 0; h < NH; ++h) rotate_head(o + h * HS, xq + h * HS, c, s, H);
    for (int64_t h = 0; h < KVH; ++h) rotate_head(o + QC + h * HS, xk + h * HS, c, s, H);
    std::memcpy(o + QC + KC, v.data() + bt * KC, size_t(KC) * sizeof(bf16));
  }
}

void rope_qkv_bf16_backward(std::span<bf16> dq, std::span<bf16> dk, std::span<bf16> dv,
                            std::span<const bf16> dqkv, std::span<const float> cos, std::span<const float> sin,
                            int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HS) {
  REMAT_ASSERT(HS % 2 == 0,
               "rope_qkv_bf16_backward: head size HS must be even (RoPE rotates pairs (x[i], x[i+HS/2]))");
  const int64_t H = HS / 2, QC = NH * HS, KC = KVH * HS, C3 = QC + 2 * KC;
  const bool want_q = !dq.empty(), want_k = !dk.empty(), want_v = !dv.empty();
  REMAT_ASSERT(int64_t(dqkv.size()) >= B * T * C3 && (!want_q || int64_t(dq.size()) >= B * T * QC) &&
                   (!want_k || int64_t(dk.size()) >= B * T * KC) && (!want_v || int64_t(dv.size()) >= B * T * KC) &&
                   int64_t(cos.size()) >= T * H && int64_t(sin.size()) >= T * H,
               "rope_qkv_bf16_backward: span too small (or tables shorter than T)");
  // forward was: qkv_q = R q, qkv_k = R k (R orthogonal, per pair), qkv_v = v, so
  //   dq += R^T dqkv_q, dk += R^T dqkv_k, dv += dqkv_v.
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const int64_t t = bt % T;
    const float* c = cos.data() + t * H;
    const float* s = sin.data() + t * H;
    const bf16* g = dqkv.data() + bt * C3;
    if (want_q)
      for (int64_t h = 0; h < NH; ++h) rotate_head_back_add(dq.data() + bt * QC + h * HS, g + h * HS, c, s, H);
    if (want_k)
      for (int64_t h = 0; h < KVH; ++h)
        rotate_head_back_add(dk.data() + bt * KC + h * HS, g + QC + h * HS, c, s, H);
    if (want_v) add_row(dv.data() + bt * KC, g + QC + KC, KC);
  }
}

}  // namespace remat::kernels
