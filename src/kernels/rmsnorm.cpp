#include "kernels/rmsnorm.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/vec16.h"

namespace remat::kernels {

namespace {

// GCC/Clang generic vectors: 16 float lanes, lane-wise IEEE semantics (one zmm on AVX-512). Row
// reductions keep 16 partial sums in one of these and combine them in a fixed tree; row tails are
// zero-padded (0 * 0 adds nothing), so every element goes through the same code.
using namespace vec16;
constexpr int64_t kChanBlock = 64;  // channels per dweight task

inline float row_sum_sq(const float* x, int64_t C) {
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
[[gnu::noinline]] void apply_row(float* __restrict o, const float* __restrict x, const float* __restrict w,
                                 float s, int64_t C) {
  for (int64_t c = 0; c < C; ++c) o[c] = x[c] * s * w[c];
}

}  // namespace

void rmsnorm_forward(std::span<float> out, std::span<float> rstd, std::span<const float> inp,
                     std::span<const float> weight, int64_t N, int64_t C, float eps) {
  REMAT_ASSERT(int64_t(out.size()) >= N * C && int64_t(inp.size()) >= N * C && int64_t(rstd.size()) >= N &&
                   int64_t(weight.size()) >= C,
               "rmsnorm_forward: span too small");
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp.data() + n * C;
    const float s = 1.0f / std::sqrt(row_sum_sq(x, C) / float(C) + eps);
    apply_row(out.data() + n * C, x, weight.data(), s, C);
    rstd[n] = s;
  }
}

void rmsnorm_apply(std::span<float> out, std::span<const float> inp, std::span<const float> weight,
                   std::span<const float> rstd, int64_t N, int64_t C) {
  REMAT_ASSERT(int64_t(out.size()) >= N * C && int64_t(inp.size()) >= N * C && int64_t(rstd.size()) >= N &&
                   int64_t(weight.size()) >= C,
               "rmsnorm_apply: span too small");
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) apply_row(out.data() + n * C, inp.data() + n * C, weight.data(), rstd[n], C);
}

void rmsnorm_backward(std::span<float> dinp, std::span<float> dweight, std::span<const float> dout,
                      std::span<const float> inp, std::span<const float> weight, std::span<const float> rstd,
                      int64_t N, int64_t C) {
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
    const float* x = inp.data() + n * C;
    const float* d = dout.data() + n * C;
    float* dx = dinp.data() + n * C;
    const float s = rstd[n];
    v16f acc_gn = {};
    int64_t i = 0;
    for (; i + kLanes <= C; i += kLanes) acc_gn += load16(w + i) * load16(d + i) * (load16(x + i) * s);
    acc_gn += load_tail(w + i, C - i) * load_tail(d + i, C - i) * (load_tail(x + i, C - i) * s);  // zero padding
    const float gn_mean = hsum(acc_gn) / float(C);
    for (int64_t c = 0; c < C; ++c) dx[c] += (w[c] * d[c] - x[c] * s * gn_mean) * s;
  }
  // ... and dweight += sum_rows(norm * dout): each channel block owned by one thread and summed over
  // rows in order.
  const int64_t nblocks = (C + kChanBlock - 1) / kChanBlock;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t c0 = blk * kChanBlock, len = std::min(kChanBlock, C - c0);
    float aw[kChanBlock] = {};
    for (int64_t n = 0; n < N; ++n) {
      const float* x = inp.data() + n * C + c0;
      const float* d = dout.data() + n * C + c0;
      const float s = rstd[n];
      for (int64_t j = 0; j < len; ++j) aw[j] += x[j] * s * d[j];
    }
    for (int64_t j = 0; j < len; ++j) dweight[c0 + j] += aw[j];
  }
}

}  // namespace remat::kernels
