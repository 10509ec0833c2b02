// Dropout on bf16 tensors with the mask of dropout.h: element i of a call is kept iff
// dropout_keep(seed, offset + i, p) (philox.h), so a bf16 run, an fp32 run and any replay of either
// drop the same positions, and a recompute needs no stored mask. Kept elements are multiplied by
// 1/(1-p) (computed once, as dropout.cpp) in fp32 and rounded once: the output is the fp32 kernel's
// output on the widened input, rounded to bf16 (the same bits).
// Backward ADDS into its output (+=; read as bf16, fma in fp32 as dropout.cpp, rounded once).
#pragma once
#include <cstdint>
#include <span>

#include "kernels/bf16.h"

namespace remat::kernels {

// out[i] = keep(i) ? inp[i] * (1/(1-p)) : 0 for i < N. p in [0, 1]; p == 0 is a plain copy, p == 1
// writes zeros. out may alias inp.
void dropout_bf16_forward(std::span<bf16> out, std::span<const bf16> inp, int64_t N, float p, uint64_t seed,
                          uint64_t offset);

// Accumulates dinp[i] += keep(i) ? dout[i] * (1/(1-p)) : 0, regenerating the forward's mask.
void dropout_bf16_backward(std::span<bf16> dinp, std::span<const bf16> dout, int64_t N, float p, uint64_t seed,
                           uint64_t offset);

}  // namespace remat::kernels
