#include "kernels/crossentropy_bf16.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/exp_fast.h"
#include "kernels/vec_bf16.h"

namespace remat::kernels {

namespace {

using vec_bf16::kChunk;
using vec_bf16::kLanes;
using vec_bf16::load16;
using vec_bf16::load_tail;
using vec_bf16::v16f;

// As crossentropy.cpp: 16 lanes, the tail padded (-inf for the max, exp(-inf) = 0 for the sum), a
// fixed-order tree combine: bit-identical for any thread count.
inline float row_max(const bf16* x, int64_t V) {
  v16f acc = load_tail(x, 0, -INFINITY);
  int64_t i = 0;
  for (; i + kLanes <= V; i += kLanes) {
    const v16f v = load16(x + i);
    acc = v > acc ? v : acc;
  }
  const v16f v = load_tail(x + i, V - i, -INFINITY);
  acc = v > acc ? v : acc;
  float m = acc[0];
  for (int j = 1; j < kLanes; ++j) m = acc[j] > m ? acc[j] : m;
  return m;
}

inline float row_sum_exp(const bf16* x, float mx, int64_t V) {
  v16f acc = {};
  int64_t i = 0;
  for (; i + kLanes <= V; i += kLanes) acc += exp_fast(load16(x + i) - mx);
  acc += exp_fast(load_tail(x + i, V - i, -INFINITY) - mx);
  for (int w = kLanes / 2; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}

}  // namespace

void crossentropy_bf16_forward(std::span<float> losses, std::span<float> lse, std::span<const bf16> logits,
                               const int32_t* targets, int64_t N, int64_t V) {
  REMAT_ASSERT(int64_t(losses.size()) >= N && int64_t(lse.size()) >= N && int64_t(logits.size()) >= N * V,
               "crossentropy_bf16_forward: span too small");
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const bf16* x = logits.data() + n * V;
    const int64_t t = targets[n];
    REMAT_ASSERT(t < V, "crossentropy_bf16_forward: target out of range");
    const float mx = row_max(x, V);
    const float l = mx + std::log(row_sum_exp(x, mx, V));
    lse[n] = l;
    losses[n] = t < 0 ? 0.0f : l - bf16_to_float(x[t]);
  }
}

void crossentropy_bf16_backward(std::span<bf16> dlogits, std::span<const float> dlosses,
                                std::span<const bf16> logits, std::span<const float> lse, const int32_t* targets,
                                int64_t N, int64_t V, bool overwrite) {
  REMAT_ASSERT(int64_t(dlogits.size()) >= N * V && int64_t(dlosses.size()) >= N && int64_t(lse.size()) >= N &&
                   int64_t(logits.size()) >= N * V,
               "crossentropy_bf16_backward: span too small");
  REMAT_ASSERT(overwrite || dlogits.data() != logits.data(), "crossentropy_bf16_backward: accumulating in place");
  // forward was: loss = lse - logits[t], so dlogits += dloss * (exp(logits - lse) - onehot(t)). Each
  // chunk of a row is computed in fp32 (the one-hot term included) from logits read before the chunk
  // is stored, then rounded once: in place is safe.
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const int64_t t = targets[n];
    bf16* dx = dlogits.data() + n * V;
    if (t < 0) {  // ignored row: no gradient
      if (overwrite) std::fill(dx, dx + V, bf16{0});
      continue;
    }
    REMAT_ASSERT(t < V, "crossentropy_bf16_backward: target out of range");
    const bf16* x = logits.data() + n * V;
    const float dl = dlosses[n], l = lse[n];
    for (int64_t j0 = 0; j0 < V; j0 += kChunk) {
      const int64_t len = std::min(kChunk, V - j0);
      float g[kChunk];
      for (int64_t k = 0; k < len; ++k) {
        const float base = overwrite ? 0.0f : bf16_to_float(dx[j0 + k]);
        g[k] = base + dl * exp_fast(bf16_to_float(x[j0 + k]) - l);
      }
      if (t >= j0 && t < j0 + len) g[t - j0] -= dl;
      to_bf16(dx + j0, g, len);
    }
  }
}

}  // namespace remat::kernels
