#include "kernels/crossentropy.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/exp_fast.h"
#include "kernels/vec_bf16.h"

namespace remat::kernels {

namespace {

// GCC/Clang generic vectors: 16 float lanes with lane-wise IEEE semantics (vec_bf16.h's loads, which
// widen bf16). On AVX-512 one register; on narrower ISAs the compiler splits it, with the same bits.
// Every logit goes through the same vector code (row tails are padded: -inf for the max, exp(-inf) = 0
// for the sum), so no element depends on where a scalar epilogue would begin; a fixed-order tree
// combine makes the result bit-identical for any thread count.
using namespace vec_bf16;

template <class S>
float row_max(const S* x, int64_t V) {
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

// exp per lane: exp_fast (exp_fast.h), the same function lane for lane as GELU's and SwiGLU's scalar one.
template <class S>
float row_sum_exp(const S* x, float mx, int64_t V) {
  v16f acc = {};
  int64_t i = 0;
  for (; i + kLanes <= V; i += kLanes) acc += exp_fast(load16(x + i) - mx);
  acc += exp_fast(load_tail(x + i, V - i, -INFINITY) - mx);  // padding contributes exp(-inf) = 0
  for (int w = kLanes / 2; w >= 1; w /= 2)                   // fixed-order tree combine
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}

}  // namespace

template <class S>
void crossentropy_forward(std::span<float> losses, std::span<float> lse, std::span<const S> logits,
                          const int32_t* targets, int64_t N, int64_t V) {
  REMAT_ASSERT(int64_t(losses.size()) >= N && int64_t(lse.size()) >= N && int64_t(logits.size()) >= N * V,
               "crossentropy_forward: span too small");
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const S* x = logits.data() + n * V;
    const int64_t t = targets[n];
    REMAT_ASSERT(t < V, "crossentropy_forward: target out of range");
    const float mx = row_max(x, V);
    const float l = mx + std::log(row_sum_exp(x, mx, V));
    lse[n] = l;
    losses[n] = t < 0 ? 0.0f : l - widen(x[t]);
  }
}

template <class S>
void crossentropy_backward(std::span<S> dlogits, std::span<const float> dlosses, std::span<const S> logits,
                           std::span<const float> lse, const int32_t* targets, int64_t N, int64_t V, bool overwrite) {
  REMAT_ASSERT(int64_t(dlogits.size()) >= N * V && int64_t(dlosses.size()) >= N && int64_t(lse.size()) >= N &&
                   int64_t(logits.size()) >= N * V,
               "crossentropy_backward: span too small");
  REMAT_ASSERT(overwrite || dlogits.data() != logits.data(), "crossentropy_backward: accumulating in place");
  // forward was: loss = lse - logits[t], so dlogits += dloss * (exp(logits - lse) - onehot(t)).
  // With `overwrite` the old contents count as +0: the row is computed as +0 + dloss * exp(...), the
  // very operations of accumulating into a zero-filled buffer (the same bits, signed zeros included),
  // without reading dlogits -- which may therefore be `logits` itself: each 16-lane group is loaded
  // before the same group is written (fp32), or a chunk is computed whole in fp32 before it is stored
  // (bf16), and dx[t] is fixed up before the chunk holding it is stored.
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const int64_t t = targets[n];
    S* dx = dlogits.data() + n * V;
    if (t < 0) {  // ignored row: no gradient
      if (overwrite) std::fill(dx, dx + V, S{0});
      continue;
    }
    REMAT_ASSERT(t < V, "crossentropy_backward: target out of range");
    const S* x = logits.data() + n * V;
    const float dl = dlosses[n], l = lse[n];
    const v16f zero = {};
    for (int64_t j0 = 0; j0 < V; j0 += kChunk) {
      const int64_t len = std::min(kChunk, V - j0);
      float buf[kChunk];
      float* g = chunk_out(dx + j0, buf);
      const S *xc = x + j0, *dc = dx + j0;
      int64_t j = 0;
      for (; j + kLanes <= len; j += kLanes) {
        const v16f v = (overwrite ? zero : load16(dc + j)) + dl * exp_fast(load16(xc + j) - l);
        std::memcpy(g + j, &v, sizeof v);
      }
      const v16f v =
          (overwrite ? zero : load_tail(dc + j, len - j, 0.0f)) + dl * exp_fast(load_tail(xc + j, len - j, 0.0f) - l);
      for (int64_t k = 0; j + k < len; ++k) g[j + k] = v[k];
      if (t >= j0 && t < j0 + len) g[t - j0] -= dl;
      store(dx + j0, g, len);
    }
  }
}

template void crossentropy_forward(std::span<float>, std::span<float>, std::span<const float>, const int32_t*, int64_t,
                                   int64_t);
template void crossentropy_forward(std::span<float>, std::span<float>, std::span<const bf16>, const int32_t*, int64_t,
                                   int64_t);
template void crossentropy_backward(std::span<float>, std::span<const float>, std::span<const float>,
                                    std::span<const float>, const int32_t*, int64_t, int64_t, bool);
template void crossentropy_backward(std::span<bf16>, std::span<const float>, std::span<const bf16>,
                                    std::span<const float>, const int32_t*, int64_t, int64_t, bool);

}  // namespace remat::kernels
