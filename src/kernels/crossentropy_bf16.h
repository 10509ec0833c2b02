// Softmax cross-entropy (as crossentropy.h) from bf16 logits (N, V): the max, the sum of
// exponentials, the log-sum-exp and the losses are fp32. A target < 0 means "ignore".
// Backward writes or ADDS bf16 dlogits, each element computed in fp32 and rounded once.
#pragma once
#include <cstdint>
#include <span>

#include "kernels/bf16.h"

namespace remat::kernels {

// lse[i] = log(sum_j exp(logits[i,j])) (max-subtracted, fp32), losses[i] = lse[i] - logits[i, targets[i]]
// or 0 when targets[i] < 0. Targets must be < V.
void crossentropy_bf16_forward(std::span<float> losses, std::span<float> lse, std::span<const bf16> logits,
                               const int32_t* targets, int64_t N, int64_t V);

// dlogits[i,j] (+)= dlosses[i] * (softmax(logits[i])_j - [j == targets[i]]), from the forward's lse;
// ignored rows untouched (set to 0 with `overwrite`). With `overwrite` the old contents are not read,
// and dlogits may be logits itself: the gradient replaces the logits in place.
void crossentropy_bf16_backward(std::span<bf16> dlogits, std::span<const float> dlosses,
                                std::span<const bf16> logits, std::span<const float> lse, const int32_t* targets,
                                int64_t N, int64_t V, bool overwrite = false);

}  // namespace remat::kernels
