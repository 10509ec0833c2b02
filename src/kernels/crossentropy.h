// Softmax cross-entropy over logits (N, V) with int32 targets; a target < 0 means "ignore" (loss 0,
// no gradient). Backward ADDS into its output (+=), or overwrites it (in place over the logits if asked).
#pragma once
#include <cstdint>
#include <span>

namespace remat::kernels {

// lse[i] = log(sum_j exp(logits[i,j])) (max-subtracted), losses[i] = lse[i] - logits[i, targets[i]],
// or 0 when targets[i] < 0 (lse is still written). Targets must be < V.
void crossentropy_forward(std::span<float> losses, std::span<float> lse, std::span<const float> logits,
                          const int32_t* targets, int64_t N, int64_t V);

// Accumulates dlogits[i,j] += dlosses[i] * (softmax(logits[i])_j - [j == targets[i]]), using the
// forward's lse; rows with targets[i] < 0 are left untouched.
// With `overwrite`, writes dlogits instead (old contents ignored: no zero fill needed; ignored rows
// are set to 0), bit for bit what accumulating into a zero-filled buffer gives. Only then may
// dlogits be logits itself: the gradient replaces the logits in place.
void crossentropy_backward(std::span<float> dlogits, std::span<const float> dlosses, std::span<const float> logits,
                           std::span<const float> lse, const int32_t* targets, int64_t N, int64_t V,
                           bool overwrite = false);

}  // namespace remat::kernels
