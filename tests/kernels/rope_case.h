// Shared by test_rope.cpp and test_rope_bf16.cpp: a RoPE problem's shape and its cos/sin tables.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/rope.h"

namespace remat::test {

struct RopeShape {
  int64_t B, T, NH, KVH, HS;
  int64_t QC() const { return NH * HS; }               // q row width
  int64_t KC() const { return KVH * HS; }              // k and v row width
  int64_t C3() const { return QC() + 2 * KC(); }       // qkv row width
};

struct RopeTables {
  std::vector<float> cos, sin;
};
inline RopeTables rope_tables(int64_t T, int64_t HS, float theta = 10000.0f) {
  RopeTables t{std::vector<float>(T * HS / 2), std::vector<float>(T * HS / 2)};
  kernels::rope_table(t.cos, t.sin, T, HS, theta);
  return t;
}

}  // namespace remat::test
