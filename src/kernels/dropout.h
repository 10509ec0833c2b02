// Dropout with a regenerated mask. Element i of a call is kept iff dropout_keep(seed, offset + i, p)
// (philox.h), so the mask is a pure function of (seed, offset + i): it is never stored, a recompute
// replays it exactly, and any split of a tensor into sub-ranges (offset shifted accordingly) sees the
// same mask. Kept elements are scaled by 1/(1-p), computed once and multiplied (as PyTorch does).
// Backward ADDS into its output (+=).
#pragma once
#include <cstdint>
#include <span>

namespace remat::kernels {

// out[i] = keep(i) ? inp[i] * (1/(1-p)) : 0 for i < N. p in [0, 1]; p == 0 is a plain copy, p == 1
// writes zeros. out may alias inp.
void dropout_forward(std::span<float> out, std::span<const float> inp, int64_t N, float p, uint64_t seed,
                     uint64_t offset);

// Accumulates dinp[i] += keep(i) ? dout[i] * (1/(1-p)) : 0, regenerating the forward's mask.
void dropout_backward(std::span<float> dinp, std::span<const float> dout, int64_t N, float p, uint64_t seed,
                      uint64_t offset);

}  // namespace remat::kernels
