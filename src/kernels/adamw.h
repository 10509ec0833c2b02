// AdamW optimizer step and gradient-norm helpers. Elementwise, so bit-identical for any thread count.
#pragma once
#include <cstdint>
#include <span>

#include "kernels/bf16.h"

namespace remat::kernels {

// One AdamW step on N parameters, as torch.optim.AdamW: decoupled weight decay p -= lr*wd*p, then
// m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p -= (lr / (1-b1^t)) * m / (sqrt(v) / sqrt(1-b2^t) + eps).
// t is the 1-based step count. Updates params, m and v in place.
// lowp (may be null): also writes the updated params rounded to bf16 there (--precision bf16's matmul
// copy), chunk by chunk while they are in cache, instead of a second pass over the masters.
void adamw_update(std::span<float> params, std::span<const float> grads, std::span<float> m, std::span<float> v,
                  int64_t N, float lr, float beta1, float beta2, float eps, float weight_decay, int64_t t,
                  bf16* lowp = nullptr);

// Sum of squares of g, accumulated in double over a fixed partition (64 chunks, independent of the
// thread count) combined in order: bit-identical for any thread count.
double sum_squares(std::span<const float> g);

// Squared L2 norm of a gradient (alias of sum_squares), for global-norm clipping.
inline double grad_norm_sq(std::span<const float> g) { return sum_squares(g); }

// x[i] *= s for every element of x (e.g. gradient clipping).
void scale_inplace(std::span<float> x, float s);

}  // namespace remat::kernels
