#include "kernels/adamw.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "core/error.h"

namespace remat::kernels {

namespace {
constexpr int64_t kChunks = 64;  // fixed partition for sum_squares, independent of thread count
constexpr int kLanes = 8;        // double partial sums per chunk (one zmm of doubles)

// The update runs on GCC/Clang generic vectors of 16 floats (lane-wise IEEE). Written plainly, the loop
// stays scalar: without -ffast-math, std::sqrt keeps an errno path the vectoriser cannot handle.
typedef float v16f __attribute__((vector_size(64)));
constexpr int64_t kVec = 16;

inline v16f load16(const float* p, int64_t n) {  // p[0..n), zeros after
  v16f v = {};
  if (n == kVec) std::memcpy(&v, p, sizeof v);
  else
    for (int64_t j = 0; j < n; ++j) v[j] = p[j];
  return v;
}
inline void store16(float* p, v16f v, int64_t n) {
  if (n == kVec) std::memcpy(p, &v, sizeof v);
  else
    for (int64_t j = 0; j < n; ++j) p[j] = v[j];
}
// sqrt is correctly rounded in IEEE 754, so the intrinsic and the per-lane fallback give the same bits.
inline v16f sqrt16(v16f v) {
#if defined(__AVX512F__)
  return (v16f)_mm512_maskz_sqrt_ps(0xFFFF, (__m512)v);  // maskz: GCC 12 warns on the undefined-src form
#else
  for (int j = 0; j < kVec; ++j) v[j] = std::sqrt(v[j]);
  return v;
#endif
}
}  // namespace

void adamw_update(std::span<float> params, std::span<const float> grads, std::span<float> m, std::span<float> v,
                  int64_t N, float lr, float beta1, float beta2, float eps, float weight_decay, int64_t t,
                  bf16* lowp) {
  REMAT_ASSERT(int64_t(params.size()) >= N && int64_t(grads.size()) >= N && int64_t(m.size()) >= N &&
                   int64_t(v.size()) >= N, "adamw_update: span too small");
  REMAT_ASSERT(t >= 1, "adamw_update: step t is 1-based");
  // Bias corrections in double, then rounded once (as torch computes them in Python floats).
  const double bc1 = 1.0 - std::pow(double(beta1), double(t));
  const double bc2 = 1.0 - std::pow(double(beta2), double(t));
  const float step_size = float(double(lr) / bc1);
  const float inv_sqrt_bc2 = float(1.0 / std::sqrt(bc2));
  const float decay = 1.0f - lr * weight_decay;
  float* p = params.data();
  const float* g = grads.data();
  float* pm = m.data();
  float* pv = v.data();
  constexpr int64_t kChunk = 64 * kVec;  // a chunk's params are narrowed to bf16 while in L1
  const int64_t nchunks = (N + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < nchunks; ++c) {
    const int64_t c0 = c * kChunk, c1 = std::min(N, c0 + kChunk);
    for (int64_t i = c0; i < c1; i += kVec) {
      const int64_t n = std::min(kVec, c1 - i);
      const v16f gi = load16(g + i, n);
      const v16f mi = beta1 * load16(pm + i, n) + (1.0f - beta1) * gi;
      const v16f vi = beta2 * load16(pv + i, n) + (1.0f - beta2) * gi * gi;
      const v16f denom = sqrt16(vi) * inv_sqrt_bc2 + eps;
      store16(pm + i, mi, n);
      store16(pv + i, vi, n);
      store16(p + i, load16(p + i, n) * decay - step_size * (mi / denom), n);
    }
    if (lowp) to_bf16(lowp + c0, p + c0, c1 - c0);
  }
}

double sum_squares(std::span<const float> g) {
  const int64_t n = int64_t(g.size());
  double part[kChunks];
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < kChunks; ++c) {
    const int64_t lo = n * c / kChunks, hi = n * (c + 1) / kChunks;
    double acc[kLanes] = {};
    int64_t i = lo;
    for (; i + kLanes <= hi; i += kLanes)
      for (int j = 0; j < kLanes; ++j) acc[j] += double(g[i + j]) * double(g[i + j]);
    for (int j = 0; i + j < hi; ++j) acc[j] += double(g[i + j]) * double(g[i + j]);
    double s = 0.0;
    for (int j = 0; j < kLanes; ++j) s += acc[j];
    part[c] = s;
  }
  double total = 0.0;
  for (int64_t c = 0; c < kChunks; ++c) total += part[c];
  return total;
}

void scale_inplace(std::span<float> x, float s) {
  const int64_t n = int64_t(x.size());
  float* p = x.data();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) p[i] *= s;
}

}  // namespace remat::kernels
