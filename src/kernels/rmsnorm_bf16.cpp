#include "kernels/rmsnorm_bf16.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
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
constexpr int64_t kChanBlock = 64;  // channels per dweight task

// X is the type of the input and of its gradient: bf16 (rmsnorm_bf16_*) or float (rmsnorm_mixed_*).
// The loads, widen() and store() are vec_bf16.h's, overloaded on X.

template <class X>
float row_sum_sq(const X* x, int64_t C) {
  v16f acc = {};
  int64_t i = 0;
  for (; i + kLanes <= C; i += kLanes) {
    const v16f v = load16(x + i);
    acc += v * v;
  }
  const v16f v = load_tail(x + i, C - i);
  return hsum(acc + v * v);
}

// The one copy of the normalisation expression (noinline: forward and apply of each input type share
// the machine code).
template <class X>
[[gnu::noinline]] void apply_row(bf16* o, const X* x, const float* w, float s, int64_t C) {
  for (int64_t c0 = 0; c0 < C; c0 += kChunk) {
    const int64_t len = std::min(kChunk, C - c0);
    float t[kChunk];
    for (int64_t c = 0; c < len; ++c) t[c] = widen(x[c0 + c]) * s * w[c0 + c];
    to_bf16(o + c0, t, len);
  }
}

template <class X>
void forward(bf16* out, float* rstd, const X* inp, const float* w, int64_t N, int64_t C, float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const X* x = inp + n * C;
    const float s = 1.0f / std::sqrt(row_sum_sq(x, C) / float(C) + eps);
    apply_row(out + n * C, x, w, s, C);
    rstd[n] = s;
  }
}

template <class X>
void apply(bf16* out, const X* inp, const float* w, const float* rstd, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) apply_row(out + n * C, inp + n * C, w, rstd[n], C);
}

template <class X>
void backward(X* dinp, float* dweight, const bf16* dout, const X* inp, const float* w, const float* rstd, int64_t N,
              int64_t C) {
  // As rmsnorm.cpp: with g = w * dout and norm = x * rstd, dinp += rstd * (g - norm * mean(g * norm)).
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const X* x = inp + n * C;
    const bf16* d = dout + n * C;
    X* dx = dinp + n * C;
    const float s = rstd[n];
    v16f acc_gn = {};
    int64_t i = 0;
    for (; i + kLanes <= C; i += kLanes) acc_gn += vec16::load16(w + i) * load16(d + i) * (load16(x + i) * s);
    acc_gn += vec16::load_tail(w + i, C - i) * load_tail(d + i, C - i) * (load_tail(x + i, C - i) * s);
    const float gn_mean = hsum(acc_gn) / float(C);
    for (int64_t c0 = 0; c0 < C; c0 += kChunk) {
      const int64_t len = std::min(kChunk, C - c0);
      float t[kChunk];
      for (int64_t k = 0; k < len; ++k) {
        const int64_t c = c0 + k;
        const float xc = widen(x[c]);
        t[k] = widen(dx[c]) + (w[c] * bf16_to_float(d[c]) - xc * s * gn_mean) * s;
      }
      store(dx + c0, t, len);
    }
  }
  // ... and dweight += sum_rows(norm * dout), in fp32: channel blocks, rows in order.
  const int64_t nblocks = (C + kChanBlock - 1) / kChanBlock;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t c0 = blk * kChanBlock, len = std::min(kChanBlock, C - c0);
    float aw[kChanBlock] = {};
    for (int64_t n = 0; n < N; ++n) {
      const X* x = inp + n * C + c0;
      const bf16* d = dout + n * C + c0;
      const float s = rstd[n];
      for (int64_t j = 0; j < len; ++j) aw[j] += widen(x[j]) * s * bf16_to_float(d[j]);
    }
    for (int64_t j = 0; j < len; ++j) dweight[c0 + j] += aw[j];
  }
}

}  // namespace

void rmsnorm_bf16_forward(std::span<bf16> out, std::span<float> rstd, std::span<const bf16> inp,
                          std::span<const float> weight, int64_t N, int64_t C, float eps) {
  REMAT_ASSERT(int64_t(out.size()) >= N * C && int64_t(inp.size()) >= N * C && int64_t(rstd.size()) >= N &&
                   int64_t(weight.size()) >= C,
               "rmsnorm_bf16_forward: span too small");
  forward(out.data(), rstd.data(), inp.data(), weight.data(), N, C, eps);
}

void rmsnorm_bf16_apply(std::span<bf16> out, std::span<const bf16> inp, std::span<const float> weight,
                        std::span<const float> rstd, int64_t N, int64_t C) {
  REMAT_ASSERT(int64_t(out.size()) >= N * C && int64_t(inp.size()) >= N * C && int64_t(rstd.size()) >= N &&
                   int64_t(weight.size()) >= C,
               "rmsnorm_bf16_apply: span too small");
  apply(out.data(), inp.data(), weight.data(), rstd.data(), N, C);
}

void rmsnorm_bf16_backward(std::span<bf16> dinp, std::span<float> dweight, std::span<const bf16> dout,
                           std::span<const bf16> inp, std::span<const float> weight, std::span<const float> rstd,
                           int64_t N, int64_t C) {
  REMAT_ASSERT(int64_t(dinp.size()) >= N * C && int64_t(dout.size()) >= N * C && int64_t(inp.size()) >= N * C &&
                   int64_t(rstd.size()) >= N && int64_t(weight.size()) >= C && int64_t(dweight.size()) >= C,
               "rmsnorm_bf16_backward: span too small");
  backward(dinp.data(), dweight.data(), dout.data(), inp.data(), weight.data(), rstd.data(), N, C);
}

void rmsnorm_mixed_forward(std::span<bf16> out, std::span<float> rstd, std::span<const float> inp,
                           std::span<const float> weight, int64_t N, int64_t C, float eps) {
  REMAT_ASSERT(int64_t(out.size()) >= N * C && int64_t(inp.size()) >= N * C && int64_t(rstd.size()) >= N &&
                   int64_t(weight.size()) >= C,
               "rmsnorm_mixed_forward: span too small");
  forward(out.data(), rstd.data(), inp.data(), weight.data(), N, C, eps);
}

void rmsnorm_mixed_apply(std::span<bf16> out, std::span<const float> inp, std::span<const float> weight,
                         std::span<const float> rstd, int64_t N, int64_t C) {
  REMAT_ASSERT(int64_t(out.size()) >= N * C && int64_t(inp.size()) >= N * C && int64_t(rstd.size()) >= N &&
                   int64_t(weight.size()) >= C,
               "rmsnorm_mixed_apply: span too small");
  apply(out.data(), inp.data(), weight.data(), rstd.data(), N, C);
}

void rmsnorm_mixed_backward(std::span<float> dinp, std::span<float> dweight, std::span<const bf16> dout,
                            std::span<const float> inp, std::span<const float> weight, std::span<const float> rstd,
                            int64_t N, int64_t C) {
  REMAT_ASSERT(int64_t(dinp.size()) >= N * C && int64_t(dout.size()) >= N * C && int64_t(inp.size()) >= N * C &&
                   int64_t(rstd.size()) >= N && int64_t(weight.size()) >= C && int64_t(dweight.size()) >= C,
               "rmsnorm_mixed_backward: span too small");
  backward(dinp.data(), dweight.data(), dout.data(), inp.data(), weight.data(), rstd.data(), N, C);
}

}  // namespace remat::kernels
