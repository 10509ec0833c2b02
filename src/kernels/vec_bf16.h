// Helpers shared by the bf16 kernels: 16-lane loads that widen bf16 to fp32 (exact), and the chunked
// pattern of the pointwise kernels (compute a chunk in fp32 on the stack, narrow it with to_bf16, so
// every store goes through the one rounding of bf16.h and its vectorised path).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/bf16.h"
#include "kernels/vec16.h"

namespace remat::kernels::vec_bf16 {

using vec16::kLanes;
using vec16::v16f;
typedef uint16_t v16h __attribute__((vector_size(32)));
typedef uint32_t v16u __attribute__((vector_size(64)));

inline v16f load16(const bf16* p) {
  v16h h;
  std::memcpy(&h, p, sizeof h);
  const v16u u = __builtin_convertvector(h, v16u) << 16;
  v16f f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
// p[0..n) widened, `fill` in the remaining lanes (n < 16).
inline v16f load_tail(const bf16* p, int64_t n, float fill = 0.0f) {
  v16f v;
  for (int64_t j = 0; j < kLanes; ++j) v[j] = j < n ? bf16_to_float(p[j]) : fill;
  return v;
}

// Elements per pointwise chunk: two or three fp32 chunks of 4 KiB each live on the stack.
constexpr int64_t kChunk = 1024;

// For each chunk [i0, i0 + len) of [0, n), in parallel over chunks: fn(i0, len).
template <class F>
inline void for_chunks(int64_t n, F&& fn) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) fn(c * kChunk, std::min(kChunk, n - c * kChunk));
}

}  // namespace remat::kernels::vec_bf16
