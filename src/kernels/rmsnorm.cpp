#include "kernels/rmsnorm.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/vec_bf16.h"

namespace remat::kernels {

namespace {

// GCC/Clang generic vectors: 16 float lanes, lane-wise IEEE semantics (one zmm on AVX-512). Row
// reductions keep 16 partial sums in one of these and combine them in a fixed tree; row tails are
// zero-padded (0 * 0 adds nothing), so every element goes through the same code. The loads, widen()
// and store() are vec_bf16.h's, overloaded on the storage type.
using vec16::hsum;
using namespace vec_bf16;
constexpr int64_t kChanBlock = 64;  // channels per dweight task

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

// The one copy of the normalisation expression. noinline so forward and apply share the exact same
// machine code (and FMA contraction), which is what makes the recompute bit-exact.
template <class X, class Y>
[[gnu::noinline]] void apply_row(Y* __restrict o, const X* __restrict x, const float* __restrict w, float s,
                                 int64_t C) {
  for_row_chunks(o, C, [&](float* __restrict t, int64_t c0, int64_t len) {
    for (int64_t c = 0; c < len; ++c) t[c] = widen(x[c0 + c]) * s * w[c0 + c];
  });
}

#define REMAT_RMSNORM_CHECK(what)                                                                           \
  REMAT_ASSERT(int64_t(out.size()) >= N * C && int64_t(inp.size()) >= N * C && int64_t(rstd.size()) >= N && \
                   int64_t(weight.size()) >= C,                                                             \
               what ": span too small")

}  // namespace

template <class X, class Y>
void rmsnorm_forward(std::span<std::type_identity_t<Y>> out, std::span<float> rstd, std::span<const X> inp,
                     std::span<const float> weight, int64_t N, int64_t C, float eps) {
  REMAT_RMSNORM_CHECK("rmsnorm_forward");
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const X* x = inp.data() + n * C;
    const float s = 1.0f / std::sqrt(row_sum_sq(x, C) / float(C) + eps);
    apply_row(out.data() + n * C, x, weight.data(), s, C);
    rstd[n] = s;
  }
}

template <class X, class Y>
void rmsnorm_apply(std::span<std::type_identity_t<Y>> out, std::span<const X> inp, std::span<const float> weight,
                   std::span<const float> rstd, int64_t N, int64_t C) {
  REMAT_RMSNORM_CHECK("rmsnorm_apply");
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) apply_row(out.data() + n * C, inp.data() + n * C, weight.data(), rstd[n], C);
}

template <class X, class Y>
void rmsnorm_backward(std::span<X> dinp, std::span<float> dweight, std::span<const std::type_identity_t<Y>> dout,
                      std::span<const X> inp, std::span<const float> weight, std::span<const float> rstd, int64_t N,
                      int64_t C) {
  REMAT_ASSERT(int64_t(dinp.size()) >= N * C && int64_t(dout.size()) >= N * C && int64_t(inp.size()) >= N * C &&
                   int64_t(rstd.size()) >= N && int64_t(weight.size()) >= C && int64_t(dweight.size()) >= C,
               "rmsnorm_backward: span too small");
  const float* w = weight.data();
  // forward was: out = norm * w with norm = x * rstd and rstd = (mean(x^2) + eps)^(-1/2), so
  // d rstd / d x_j = -rstd^3 x_j / C and, with g = w * dout:
  //   dinp += rstd * (g - norm * mean(g * norm))
  // (layernorm's formula without the mean(g) term, since no mean was subtracted).
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const X* x = inp.data() + n * C;
    const Y* d = dout.data() + n * C;
    X* dx = dinp.data() + n * C;
    const float s = rstd[n];
    v16f acc_gn = {};
    int64_t i = 0;
    for (; i + kLanes <= C; i += kLanes) acc_gn += load16(w + i) * load16(d + i) * (load16(x + i) * s);
    acc_gn += load_tail(w + i, C - i) * load_tail(d + i, C - i) * (load_tail(x + i, C - i) * s);  // zero padding
    const float gn_mean = hsum(acc_gn) / float(C);
    for_row_chunks(dx, C, [&](float* t, int64_t c0, int64_t len) {
      for (int64_t k = 0; k < len; ++k) {
        const int64_t c = c0 + k;
        t[k] = widen(dx[c]) + (w[c] * widen(d[c]) - widen(x[c]) * s * gn_mean) * s;
      }
    });
  }
  // ... and dweight += sum_rows(norm * dout): each channel block owned by one thread and summed over
  // rows in order.
  const int64_t nblocks = (C + kChanBlock - 1) / kChanBlock;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t c0 = blk * kChanBlock, len = std::min(kChanBlock, C - c0);
    float aw[kChanBlock] = {};
    for (int64_t n = 0; n < N; ++n) {
      const X* x = inp.data() + n * C + c0;
      const Y* d = dout.data() + n * C + c0;
      const float s = rstd[n];
      for (int64_t j = 0; j < len; ++j) aw[j] += widen(x[j]) * s * widen(d[j]);
    }
    for (int64_t j = 0; j < len; ++j) dweight[c0 + j] += aw[j];
  }
}

#define REMAT_RMSNORM_INSTANTIATE(X, Y)                                                                               \
  template void rmsnorm_forward<X, Y>(std::span<Y>, std::span<float>, std::span<const X>, std::span<const float>,     \
                                      int64_t, int64_t, float);                                                       \
  template void rmsnorm_apply<X, Y>(std::span<Y>, std::span<const X>, std::span<const float>, std::span<const float>, \
                                    int64_t, int64_t);                                                                \
  template void rmsnorm_backward<X, Y>(std::span<X>, std::span<float>, std::span<const Y>, std::span<const X>,        \
                                       std::span<const float>, std::span<const float>, int64_t, int64_t);
REMAT_RMSNORM_INSTANTIATE(float, float)
REMAT_RMSNORM_INSTANTIATE(bf16, bf16)
REMAT_RMSNORM_INSTANTIATE(float, bf16)

}  // namespace remat::kernels
