#include "kernels/layernorm.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/vec_bf16.h"

namespace remat::kernels {

namespace {

// GCC/Clang generic vectors: 16 float lanes, lane-wise IEEE semantics (one zmm on AVX-512). Row
// reductions keep 16 partial sums in one of these and combine them in a fixed tree; row tails are
// zero-padded, so every element goes through the same code. The loads, widen() and store() are
// vec_bf16.h's, overloaded on the storage type.
using vec16::hsum;
using namespace vec_bf16;
constexpr int64_t kChanBlock = 64;  // channels per dweight/dbias task

template <class X>
float row_sum(const X* x, int64_t C) {
  v16f acc = {};
  int64_t i = 0;
  for (; i + kLanes <= C; i += kLanes) acc += load16(x + i);
  return hsum(acc + load_tail(x + i, C - i));
}

template <class X>
float row_sq_dev(const X* x, float m, int64_t C) {
  v16f acc = {};
  int64_t i = 0;
  for (; i + kLanes <= C; i += kLanes) {
    const v16f d = load16(x + i) - m;
    acc += d * d;
  }
  const int64_t n = C - i;
  v16f d = load_tail(x + i, n) - m;
  for (int64_t j = n; j < kLanes; ++j) d[j] = 0.0f;  // padding must not count as (0 - m)^2
  return hsum(acc + d * d);
}

// The one copy of the normalisation expression. noinline so forward and apply share the exact same
// machine code (and FMA contraction), which is what makes the recompute bit-exact.
template <class X, class Y>
[[gnu::noinline]] void apply_row(Y* __restrict o, const X* __restrict x, const float* __restrict w,
                                 const float* __restrict b, float m, float s, int64_t C) {
  for_row_chunks(o, C, [&](float* __restrict t, int64_t c0, int64_t len) {
    for (int64_t c = 0; c < len; ++c) t[c] = (widen(x[c0 + c]) - m) * s * w[c0 + c] + b[c0 + c];
  });
}

#define REMAT_LAYERNORM_CHECK(what)                                                                         \
  REMAT_ASSERT(int64_t(out.size()) >= N * C && int64_t(inp.size()) >= N * C && int64_t(mean.size()) >= N && \
                   int64_t(rstd.size()) >= N && int64_t(weight.size()) >= C && int64_t(bias.size()) >= C,   \
               what ": span too small")

}  // namespace

template <class X, class Y>
void layernorm_forward(std::span<std::type_identity_t<Y>> out, std::span<float> mean, std::span<float> rstd,
                       std::span<const X> inp, std::span<const float> weight, std::span<const float> bias, int64_t N,
                       int64_t C) {
  REMAT_LAYERNORM_CHECK("layernorm_forward");
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const X* x = inp.data() + n * C;
    // Two passes (mean, then squared deviations): stable, unlike E[x^2] - E[x]^2.
    const float m = row_sum(x, C) / float(C);
    const float var = row_sq_dev(x, m, C) / float(C);
    const float s = 1.0f / std::sqrt(var + kLayerNormEps);
    apply_row(out.data() + n * C, x, weight.data(), bias.data(), m, s, C);
    mean[n] = m;
    rstd[n] = s;
  }
}

template <class X, class Y>
void layernorm_apply(std::span<std::type_identity_t<Y>> out, std::span<const X> inp, std::span<const float> weight,
                     std::span<const float> bias, std::span<const float> mean, std::span<const float> rstd, int64_t N,
                     int64_t C) {
  REMAT_LAYERNORM_CHECK("layernorm_apply");
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n)
    apply_row(out.data() + n * C, inp.data() + n * C, weight.data(), bias.data(), mean[n], rstd[n], C);
}

template <class X, class Y>
void layernorm_backward(std::span<X> dinp, std::span<float> dweight, std::span<float> dbias,
                        std::span<const std::type_identity_t<Y>> dout, std::span<const X> inp,
                        std::span<const float> weight, std::span<const float> mean, std::span<const float> rstd,
                        int64_t N, int64_t C) {
  REMAT_ASSERT(int64_t(dinp.size()) >= N * C && int64_t(dout.size()) >= N * C && int64_t(inp.size()) >= N * C &&
                   int64_t(mean.size()) >= N && int64_t(rstd.size()) >= N && int64_t(weight.size()) >= C &&
                   int64_t(dweight.size()) >= C && int64_t(dbias.size()) >= C,
               "layernorm_backward: span too small");
  const float* w = weight.data();
  // forward was: out = norm * w + b with norm = (x - mean) * rstd, so with g = w * dout:
  //   dinp += rstd * (g - mean(g) - norm * mean(g * norm))
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const X* x = inp.data() + n * C;
    const Y* d = dout.data() + n * C;
    X* dx = dinp.data() + n * C;
    const float m = mean[n], s = rstd[n];
    v16f acc_g = {}, acc_gn = {};
    int64_t i = 0;
    for (; i + kLanes <= C; i += kLanes) {
      const v16f g = load16(w + i) * load16(d + i);
      acc_g += g;
      acc_gn += g * ((load16(x + i) - m) * s);
    }
    const v16f g = load_tail(w + i, C - i) * load_tail(d + i, C - i);  // zero in the padding
    acc_g += g;
    acc_gn += g * ((load_tail(x + i, C - i) - m) * s);
    const float g_mean = hsum(acc_g) / float(C);
    const float gn_mean = hsum(acc_gn) / float(C);
    for_row_chunks(dx, C, [&](float* t, int64_t c0, int64_t len) {
      for (int64_t k = 0; k < len; ++k) {
        const int64_t c = c0 + k;
        const float norm = (widen(x[c]) - m) * s;
        t[k] = widen(dx[c]) + (w[c] * widen(d[c]) - g_mean - norm * gn_mean) * s;
      }
    });
  }
  // ... and dweight += sum_rows(norm * dout), dbias += sum_rows(dout): each channel block owned by one
  // thread and summed over rows in order.
  const int64_t nblocks = (C + kChanBlock - 1) / kChanBlock;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t c0 = blk * kChanBlock, len = std::min(kChanBlock, C - c0);
    float aw[kChanBlock] = {}, ab[kChanBlock] = {};
    for (int64_t n = 0; n < N; ++n) {
      const X* x = inp.data() + n * C + c0;
      const Y* d = dout.data() + n * C + c0;
      const float m = mean[n], s = rstd[n];
      for (int64_t j = 0; j < len; ++j) {
        const float dj = widen(d[j]);
        aw[j] += (widen(x[j]) - m) * s * dj;
        ab[j] += dj;
      }
    }
    for (int64_t j = 0; j < len; ++j) {
      dweight[c0 + j] += aw[j];
      dbias[c0 + j] += ab[j];
    }
  }
}

#define REMAT_LAYERNORM_INSTANTIATE(X, Y)                                                                              \
  template void layernorm_forward<X, Y>(std::span<Y>, std::span<float>, std::span<float>, std::span<const X>,          \
                                        std::span<const float>, std::span<const float>, int64_t, int64_t);             \
  template void layernorm_apply<X, Y>(std::span<Y>, std::span<const X>, std::span<const float>,                        \
                                      std::span<const float>, std::span<const float>, std::span<const float>, int64_t, \
                                      int64_t);                                                                        \
  template void layernorm_backward<X, Y>(std::span<X>, std::span<float>, std::span<float>, std::span<const Y>,         \
                                         std::span<const X>, std::span<const float>, std::span<const float>,           \
                                         std::span<const float>, int64_t, int64_t);
REMAT_LAYERNORM_INSTANTIATE(float, float)
REMAT_LAYERNORM_INSTANTIATE(bf16, bf16)
REMAT_LAYERNORM_INSTANTIATE(float, bf16)

}  // namespace remat::kernels
