#include "kernels/crossentropy.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/exp_fast.h"

namespace remat::kernels {

namespace {

// GCC/Clang generic vectors: 16 float lanes with lane-wise IEEE semantics. On AVX-512 one register; on
// narrower ISAs the compiler splits it, with the same bits. Every logit goes through the same vector
// code (row tails are padded), so no element depends on where a scalar epilogue would begin.
typedef float v16f __attribute__((vector_size(64)));
constexpr int64_t kLanes = 16;

inline v16f load16(const float* p) {
  v16f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
// p[0..n) followed by `fill` in the remaining lanes (n < 16).
inline v16f load_tail(const float* p, int64_t n, float fill) {
  v16f v;
  for (int j = 0; j < kLanes; ++j) v[j] = j < n ? p[j] : fill;
  return v;
}

// exp per lane: exp_fast (exp_fast.h), the same function lane for lane as GELU's and SwiGLU's scalar one.
inline v16f exp16(v16f x) { return exp_fast(x); }

inline float row_max(const float* x, int64_t V) {
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

inline float row_sum_exp(const float* x, float mx, int64_t V) {
  v16f acc = {};
  int64_t i = 0;
  for (; i + kLanes <= V; i += kLanes) acc += exp16(load16(x + i) - mx);
  acc += exp16(load_tail(x + i, V - i, -INFINITY) - mx);  // padding contributes exp(-inf) = 0
  for (int w = kLanes / 2; w >= 1; w /= 2)  // fixed-order tree combine
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}

}  // namespace

void crossentropy_forward(std::span<float> losses, std::span<float> lse, std::span<const float> logits,
                          const int32_t* targets, int64_t N, int64_t V) {
  REMAT_ASSERT(int64_t(losses.size()) >= N && int64_t(lse.size()) >= N && int64_t(logits.size()) >= N * V,
               "crossentropy_forward: span too small");
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = logits.data() + n * V;
    const int64_t t = targets[n];
    REMAT_ASSERT(t < V, "crossentropy_forward: target out of range");
    const float mx = row_max(x, V);
    const float l = mx + std::log(row_sum_exp(x, mx, V));
    lse[n] = l;
    losses[n] = t < 0 ? 0.0f : l - x[t];
  }
}

void crossentropy_backward(std::span<float> dlogits, std::span<const float> dlosses, std::span<const float> logits,
                           std::span<const float> lse, const int32_t* targets, int64_t N, int64_t V, bool overwrite) {
  REMAT_ASSERT(int64_t(dlogits.size()) >= N * V && int64_t(dlosses.size()) >= N && int64_t(lse.size()) >= N &&
                   int64_t(logits.size()) >= N * V, "crossentropy_backward: span too small");
  REMAT_ASSERT(overwrite || dlogits.data() != logits.data(), "crossentropy_backward: accumulating in place");
  // forward was: loss = lse - logits[t], so dlogits += dloss * (exp(logits - lse) - onehot(t)).
  // With `overwrite` the old contents count as +0: the row is computed as +0 + dloss * exp(...), the
  // very operations of accumulating into a zero-filled buffer (the same bits, signed zeros included),
  // without reading dlogits -- which may therefore be `logits` itself: each 16-lane chunk of a row is
  // loaded before the same chunk is stored, and dx[t] is fixed up after the whole row.
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const int64_t t = targets[n];
    float* dx = dlogits.data() + n * V;
    if (t < 0) {  // ignored row: no gradient
      if (overwrite) std::fill(dx, dx + V, 0.0f);
      continue;
    }
    REMAT_ASSERT(t < V, "crossentropy_backward: target out of range");
    const float* x = logits.data() + n * V;
    const float dl = dlosses[n], l = lse[n];
    const v16f zero = {};
    int64_t j = 0;
    for (; j + kLanes <= V; j += kLanes) {
      const v16f g = (overwrite ? zero : load16(dx + j)) + dl * exp16(load16(x + j) - l);
      std::memcpy(dx + j, &g, sizeof g);
    }
    const v16f g = (overwrite ? zero : load_tail(dx + j, V - j, 0.0f)) + dl * exp16(load_tail(x + j, V - j, 0.0f) - l);
    for (int64_t k = 0; j + k < V; ++k) dx[j + k] = g[k];
    dx[t] -= dl;
  }
}

}  // namespace remat::kernels
