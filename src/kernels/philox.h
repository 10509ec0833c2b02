// Counter-based RNG (Philox4x32-10, Salmon et al., SC'11). A random number is a pure function of
// (seed, offset): there is no state to advance, stash or restore. Dropout masks are drawn at
// "offset + element index", so a recompute -- or a fused kernel that visits elements in another
// order -- replays exactly the same mask. This is what makes checkpointing with dropout bit-exact
// without saving any RNG state (spec §9).
#pragma once
#include <cstdint>

namespace remat::kernels {

struct Philox4x32 {
  uint32_t v[4];
};

// Ten rounds of Philox4x32 on counter `ctr` (128 bit) with key `key` (64 bit).
inline Philox4x32 philox4x32(uint64_t ctr_lo, uint64_t ctr_hi, uint64_t key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t c0 = uint32_t(ctr_lo), c1 = uint32_t(ctr_lo >> 32), c2 = uint32_t(ctr_hi), c3 = uint32_t(ctr_hi >> 32);
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int r = 0; r < 10; ++r) {
    uint64_t p0 = uint64_t(kM0) * c0, p1 = uint64_t(kM1) * c2;
    uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0, n1 = uint32_t(p1);
    uint32_t n2 = uint32_t(p0 >> 32) ^ c3 ^ k1, n3 = uint32_t(p0);
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    k0 += kW0; k1 += kW1;
  }
  return {{c0, c1, c2, c3}};
}

// 32 random bits for element `offset` of stream `seed`. Four consecutive offsets share one Philox call.
inline uint32_t philox_bits(uint64_t seed, uint64_t offset) {
  return philox4x32(offset >> 2, 0, seed).v[offset & 3];
}

// Uniform in [0, 1) with 24 bits of mantissa.
inline float philox_uniform(uint64_t seed, uint64_t offset) {
  return float(philox_bits(seed, offset) >> 8) * (1.0f / 16777216.0f);
}

// Dropout keep decision for element `offset`: kept with probability 1 - p.
inline bool dropout_keep(uint64_t seed, uint64_t offset, float p) {
  return philox_uniform(seed, offset) >= p;
}

}  // namespace remat::kernels
