// 16-lane float vectors (GCC vector extensions) for the row reductions of the norm kernels. A row is
// summed in 16 fixed partial sums, then folded in a fixed tree, with the tail zero-padded (0 * 0 adds
// nothing), so results do not depend on how the compiler vectorises and are bit-identical for any
// thread count. Shared by layernorm.cpp and rmsnorm.cpp.
#pragma once
#include <cstdint>
#include <cstring>

namespace remat::kernels::vec16 {

typedef float v16f __attribute__((vector_size(64)));
constexpr int64_t kLanes = 16;

inline v16f load16(const float* p) {
  v16f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline v16f load_tail(const float* p, int64_t n) {  // p[0..n), zeros after (n < 16)
  v16f v = {};
  for (int64_t j = 0; j < n; ++j) v[j] = p[j];
  return v;
}
inline float hsum(v16f v) {
  for (int w = kLanes / 2; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) v[j] += v[j + w];
  return v[0];
}

}  // namespace remat::kernels::vec16
