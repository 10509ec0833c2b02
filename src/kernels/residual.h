// Residual connections. Backward ADDS into its outputs (+=).
#pragma once
#include <cstdint>
#include <span>

namespace remat::kernels {

// out[i] = a[i] + b[i] for i < N.
void residual_forward(std::span<float> out, std::span<const float> a, std::span<const float> b, int64_t N);

// Accumulates da[i] += dout[i] and db[i] += dout[i]. da and db must not alias.
void residual_backward(std::span<float> da, std::span<float> db, std::span<const float> dout, int64_t N);

// dst[i] += src[i] for i < N.
void add_inplace(std::span<float> dst, std::span<const float> src, int64_t N);

// dst[i] = src[i] for i < N: the first gradient into a fresh buffer, instead of a zero fill and an add.
void assign(std::span<float> dst, std::span<const float> src, int64_t N);

}  // namespace remat::kernels
