#include "kernels/layernorm_bf16.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/layernorm.h"
#include "kernels/vec_bf16.h"

namespace remat::kernels {

namespace {

using vec_bf16::kChunk;
using vec_bf16::kLanes;
using vec_bf16::load16;
using vec_bf16::load_tail;
using vec_bf16::store;
using vec_bf16::v16f;
using vec_bf16::widen;
using vec16::hsum;
constexpr int64_t kChanBlock = 64;  // channels per dweight/dbias task

// X is the type of the input and of its gradient: bf16 (layernorm_bf16_*) or float (layernorm_mixed_*).
// The loads, widen() and store() are vec_bf16.h's, overloaded on X.

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

// The one copy of the normalisation expression (noinline: forward and apply of each input type share
// the machine code).
template <class X>
[[gnu::noinline]] void apply_row(bf16* o, const X* x, const float* w, const float* b, float m, float s, int64_t C) {
  for (int64_t c0 = 0; c0 < C; c0 += kChunk) {
    const int64_t len = std::min(kChunk, C - c0);
    float t[kChunk];
    for (int64_t c = 0; c < len; ++c) t[c] = (widen(x[c0 + c]) - m) * s * w[c0 + c] + b[c0 + c];
    to_bf16(o + c0, t, len);
  }
}

template <class X>
void forward(bf16* out, float* mean, float* rstd, const X* inp, const float* w, const float* b, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const X* x = inp + n * C;
    const float m = row_sum(x, C) / float(C);
    const float var = row_sq_dev(x, m, C) / float(C);
    const float s = 1.0f / std::sqrt(var + kLayerNormEps);
    apply_row(out + n * C, x, w, b, m, s, C);
    mean[n] = m;
    rstd[n] = s;
  }
}

template <class X>
void apply(bf16* out, const X* inp, const float* w, const float* b, const float* mean, const float* rstd, int64_t N,
           int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) apply_row(out + n * C, inp + n * C, w, b, mean[n], rstd[n], C);
}

template <class X>
void backward(X* dinp, float* dweight, float* dbias, const bf16* dout, const X* inp, const float* w,
              const float* mean, const float* rstd, int64_t N, int64_t C) {
  // As layernorm.cpp: with g = w * dout and norm = (x - mean) * rstd,
  //   dinp += rstd * (g - mean(g) - norm * mean(g * norm))
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const X* x = inp + n * C;
    const bf16* d = dout + n * C;
    X* dx = dinp + n * C;
    const float m = mean[n], s = rstd[n];
    v16f acc_g = {}, acc_gn = {};
    int64_t i = 0;
    for (; i + kLanes <= C; i += kLanes) {
      const v16f g = vec16::load16(w + i) * load16(d + i);
      acc_g += g;
      acc_gn += g * ((load16(x + i) - m) * s);
    }
    const v16f g = vec16::load_tail(w + i, C - i) * load_tail(d + i, C - i);  // zero in the padding
    acc_g += g;
    acc_gn += g * ((load_tail(x + i, C - i) - m) * s);
    const float g_mean = hsum(acc_g) / float(C);
    const float gn_mean = hsum(acc_gn) / float(C);
    for (int64_t c0 = 0; c0 < C; c0 += kChunk) {
      const int64_t len = std::min(kChunk, C - c0);
      float t[kChunk];
      for (int64_t k = 0; k < len; ++k) {
        const int64_t c = c0 + k;
        const float norm = (widen(x[c]) - m) * s;
        t[k] = widen(dx[c]) + (w[c] * bf16_to_float(d[c]) - g_mean - norm * gn_mean) * s;
      }
      store(dx + c0, t, len);
    }
  }
  // ... and dweight += sum_rows(norm * dout), dbias += sum_rows(dout), in fp32: each channel block
  // owned by one thread and summed over rows in order.
  const int64_t nblocks = (C + kChanBlock - 1) / kChanBlock;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t c0 = blk * kChanBlock, len = std::min(kChanBlock, C - c0);
    float aw[kChanBlock] = {}, ab[kChanBlock] = {};
    for (int64_t n = 0; n < N; ++n) {
      const X* x = inp + n * C + c0;
      const bf16* d = dout + n * C + c0;
      const float m = mean[n], s = rstd[n];
      for (int64_t j = 0; j < len; ++j) {
        const float dj = bf16_to_float(d[j]);
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

}  // namespace

void layernorm_bf16_forward(std::span<bf16> out, std::span<float> mean, std::span<float> rstd,
                            std::span<const bf16> inp, std::span<const float> weight, std::span<const float> bias,
                            int64_t N, int64_t C) {
  REMAT_ASSERT(int64_t(out.size()) >= N * C && int64_t(inp.size()) >= N * C && int64_t(mean.size()) >= N &&
                   int64_t(rstd.size()) >= N && int64_t(weight.size()) >= C && int64_t(bias.size()) >= C,
               "layernorm_bf16_forward: span too small");
  forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), N, C);
}

void layernorm_bf16_apply(std::span<bf16> out, std::span<const bf16> inp, std::span<const float> weight,
                          std::span<const float> bias, std::span<const float> mean, std::span<const float> rstd,
                          int64_t N, int64_t C) {
  REMAT_ASSERT(int64_t(out.size()) >= N * C && int64_t(inp.size()) >= N * C && int64_t(mean.size()) >= N &&
                   int64_t(rstd.size()) >= N && int64_t(weight.size()) >= C && int64_t(bias.size()) >= C,
               "layernorm_bf16_apply: span too small");
  apply(out.data(), inp.data(), weight.data(), bias.data(), mean.data(), rstd.data(), N, C);
}

void layernorm_bf16_backward(std::span<bf16> dinp, std::span<float> dweight, std::span<float> dbias,
                             std::span<const bf16> dout, std::span<const bf16> inp, std::span<const float> weight,
                             std::span<const float> mean, std::span<const float> rstd, int64_t N, int64_t C) {
  REMAT_ASSERT(int64_t(dinp.size()) >= N * C && int64_t(dout.size()) >= N * C && int64_t(inp.size()) >= N * C &&
                   int64_t(mean.size()) >= N && int64_t(rstd.size()) >= N && int64_t(weight.size()) >= C &&
                   int64_t(dweight.size()) >= C && int64_t(dbias.size()) >= C,
               "layernorm_bf16_backward: span too small");
  backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(), weight.data(), mean.data(),
           rstd.data(), N, C);
}

void layernorm_mixed_forward(std::span<bf16> out, std::span<float> mean, std::span<float> rstd,
                             std::span<const float> inp, std::span<const float> weight, std::span<const float> bias,
                             int64_t N, int64_t C) {
  REMAT_ASSERT(int64_t(out.size()) >= N * C && int64_t(inp.size()) >= N * C && int64_t(mean.size()) >= N &&
                   int64_t(rstd.size()) >= N && int64_t(weight.size()) >= C && int64_t(bias.size()) >= C,
               "layernorm_mixed_forward: span too small");
  forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), N, C);
}

void layernorm_mixed_apply(std::span<bf16> out, std::span<const float> inp, std::span<const float> weight,
                           std::span<const float> bias, std::span<const float> mean, std::span<const float> rstd,
                           int64_t N, int64_t C) {
  REMAT_ASSERT(int64_t(out.size()) >= N * C && int64_t(inp.size()) >= N * C && int64_t(mean.size()) >= N &&
                   int64_t(rstd.size()) >= N && int64_t(weight.size()) >= C && int64_t(bias.size()) >= C,
               "layernorm_mixed_apply: span too small");
  apply(out.data(), inp.data(), weight.data(), bias.data(), mean.data(), rstd.data(), N, C);
}

void layernorm_mixed_backward(std::span<float> dinp, std::span<float> dweight, std::span<float> dbias,
                              std::span<const bf16> dout, std::span<const float> inp, std::span<const float> weight,
                              std::span<const float> mean, std::span<const float> rstd, int64_t N, int64_t C) {
  REMAT_ASSERT(int64_t(dinp.size()) >= N * C && int64_t(dout.size()) >= N * C && int64_t(inp.size()) >= N * C &&
                   int64_t(mean.size()) >= N && int64_t(rstd.size()) >= N && int64_t(weight.size()) >= C &&
                   int64_t(dweight.size()) >= C && int64_t(dbias.size()) >= C,
               "layernorm_mixed_backward: span too small");
  backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(), weight.data(), mean.data(),
           rstd.data(), N, C);
}

}  // namespace remat::kernels
