// Softmax cross-entropy over logits (N, V) with int32 targets; a target < 0 means "ignore" (loss 0,
// no gradient). One kernel over the storage type S of the logits and their gradient, float or bf16
// (instantiated for both in crossentropy.cpp): the max, the sum of exponentials, the log-sum-exp and
// the losses are fp32 on either; each bf16 gradient element is computed in fp32 and rounded once.
// Backward ADDS into its output (+=), or overwrites it (in place over the logits if asked).
#pragma once
#include <cstdint>
#include <span>

#include "kernels/bf16.h"

namespace remat::kernels {

// lse[i] = log(sum_j exp(logits[i,j])) (max-subtracted), losses[i] = lse[i] - logits[i, targets[i]],
// or 0 when targets[i] < 0 (lse is still written). Targets must be < V.
template <class S>
void crossentropy_forward(std::span<float> losses, std::span<float> lse, std::span<const S> logits,
                          const int32_t* targets, int64_t N, int64_t V);

// Accumulates dlogits[i,j] += dlosses[i] * (softmax(logits[i])_j - [j == targets[i]]), using the
// forward's lse; rows with targets[i] < 0 are left untouched.
// With `overwrite`, writes dlogits instead (old contents ignored: no zero fill needed; ignored rows
// are set to 0), bit for bit what accumulating into a zero-filled buffer gives. Only then may
// dlogits be logits itself: the gradient replaces the logits in place.
template <class S>
void crossentropy_backward(std::span<S> dlogits, std::span<const float> dlosses, std::span<const S> logits,
                           std::span<const float> lse, const int32_t* targets, int64_t N, int64_t V,
                           bool overwrite = false);

}  // namespace remat::kernels
