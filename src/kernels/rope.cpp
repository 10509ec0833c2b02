#include "kernels/rope.h"

#include <cmath>

#include "core/error.h"

namespace remat::kernels {

namespace {

// One head: the rotation of the forward (sign = +1) or its transpose (sign = -1, adding into o).
// Plain loops over the HS/2 pairs with __restrict pointers: the compiler vectorises them.
inline void rotate_head(float* __restrict o, const float* __restrict x, const float* __restrict c,
                        const float* __restrict s, int64_t H) {
  for (int64_t i = 0; i < H; ++i) {
    const float a = x[i], b = x[i + H];
    o[i] = a * c[i] - b * s[i];
    o[i + H] = b * c[i] + a * s[i];
  }
}
inline void rotate_head_back_add(float* __restrict dx, const float* __restrict dy, const float* __restrict c,
                                 const float* __restrict s, int64_t H) {
  for (int64_t i = 0; i < H; ++i) {
    const float a = dy[i], b = dy[i + H];
    dx[i] += a * c[i] + b * s[i];
    dx[i + H] += b * c[i] - a * s[i];
  }
}

}  // namespace

void rope_table(std::span<float> cos, std::span<float> sin, int64_t T, int64_t HS, float theta) {
  REMAT_ASSERT(HS % 2 == 0, "rope_table: head size HS must be even (RoPE rotates pairs (x[i], x[i+HS/2]))");
  const int64_t H = HS / 2;
  REMAT_ASSERT(int64_t(cos.size()) >= T * H && int64_t(sin.size()) >= T * H, "rope_table: span too small");
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

void rope_qkv_forward(std::span<float> qkv, std::span<const float> q, std::span<const float> k,
                      std::span<const float> v, std::span<const float> cos, std::span<const float> sin,
                      int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HS) {
  REMAT_ASSERT(HS % 2 == 0, "rope_qkv_forward: head size HS must be even (RoPE rotates pairs (x[i], x[i+HS/2]))");
  const int64_t H = HS / 2, QC = NH * HS, KC = KVH * HS, C3 = QC + 2 * KC;
  REMAT_ASSERT(int64_t(qkv.size()) >= B * T * C3 && int64_t(q.size()) >= B * T * QC &&
                   int64_t(k.size()) >= B * T * KC && int64_t(v.size()) >= B * T * KC &&
                   int64_t(cos.size()) >= T * H && int64_t(sin.size()) >= T * H,
               "rope_qkv_forward: span too small (or tables shorter than T)");
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const int64_t t = bt % T;
    const float* c = cos.data() + t * H;
    const float* s = sin.data() + t * H;
    float* o = qkv.data() + bt * C3;
    const float* xq = q.data() + bt * QC;
    const float* xk = k.data() + bt * KC;
    const float* xv = v.data() + bt * KC;
    for (int64_t h = 0; h < NH; ++h) rotate_head(o + h * HS, xq + h * HS, c, s, H);
    for (int64_t h = 0; h < KVH; ++h) rotate_head(o + QC + h * HS, xk + h * HS, c, s, H);
    float* __restrict ov = o + QC + KC;
    for (int64_t j = 0; j < KC; ++j) ov[j] = xv[j];
  }
}

void rope_qkv_backward(std::span<float> dq, std::span<float> dk, std::span<float> dv, std::span<const float> dqkv,
                       std::span<const float> cos, std::span<const float> sin,
                       int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HS) {
  REMAT_ASSERT(HS % 2 == 0, "rope_qkv_backward: head size HS must be even (RoPE rotates pairs (x[i], x[i+HS/2]))");
  const int64_t H = HS / 2, QC = NH * HS, KC = KVH * HS, C3 = QC + 2 * KC;
  const bool want_q = !dq.empty(), want_k = !dk.empty(), want_v = !dv.empty();
  REMAT_ASSERT(int64_t(dqkv.size()) >= B * T * C3 && (!want_q || int64_t(dq.size()) >= B * T * QC) &&
                   (!want_k || int64_t(dk.size()) >= B * T * KC) && (!want_v || int64_t(dv.size()) >= B * T * KC) &&
                   int64_t(cos.size()) >= T * H && int64_t(sin.size()) >= T * H,
               "rope_qkv_backward: span too small (or tables shorter than T)");
  // forward was: qkv_q = R q, qkv_k = R k (R orthogonal, per pair), qkv_v = v, so
  //   dq += R^T dqkv_q, dk += R^T dqkv_k, dv += dqkv_v.
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const int64_t t = bt % T;
    const float* c = cos.data() + t * H;
    const float* s = sin.data() + t * H;
    const float* g = dqkv.data() + bt * C3;
    if (want_q)
      for (int64_t h = 0; h < NH; ++h) rotate_head_back_add(dq.data() + bt * QC + h * HS, g + h * HS, c, s, H);
    if (want_k)
      for (int64_t h = 0; h < KVH; ++h)
        rotate_head_back_add(dk.data() + bt * KC + h * HS, g + QC + h * HS, c, s, H);
    if (want_v) {
      float* __restrict gv = dv.data() + bt * KC;
      const float* gvs = g + QC + KC;
      for (int64_t j = 0; j < KC; ++j) gv[j] += gvs[j];
    }
  }
}

}  // namespace remat::kernels
