// LayerNorm over the last dimension (eps = 1e-5). Backward ADDS into its outputs (+=).
// Row reductions use 16 fixed partial sums (one AVX-512 register), so results do not depend on
// how the compiler vectorises and are bit-identical for any thread count.
#pragma once
#include <cstdint>
#include <span>

namespace remat::kernels {

inline constexpr float kLayerNormEps = 1e-5f;

// out(N,C) = (inp - mean) * rstd * weight + bias per row; saves mean(N) and rstd(N) = 1/sqrt(var+eps)
// (biased variance) for the backward pass.
void layernorm_forward(std::span<float> out, std::span<float> mean, std::span<float> rstd,
                       std::span<const float> inp, std::span<const float> weight, std::span<const float> bias,
                       int64_t N, int64_t C);

// Recomputes out from saved mean/rstd, bit-identical to what layernorm_forward wrote (same code path).
// out must not alias inp (here and in layernorm_forward).
void layernorm_apply(std::span<float> out, std::span<const float> inp, std::span<const float> weight,
                     std::span<const float> bias, std::span<const float> mean, std::span<const float> rstd,
                     int64_t N, int64_t C);

// Accumulates dinp(N,C), dweight(C), dbias(C). dinp is parallel over rows; dweight/dbias are
// parallel over channel blocks, each summed over rows in order (a second pass over inp/dout, in
// exchange for needing no scratch and being independent of the thread count).
void layernorm_backward(std::span<float> dinp, std::span<float> dweight, std::span<float> dbias,
                        std::span<const float> dout, std::span<const float> inp, std::span<const float> weight,
                        std::span<const float> mean, std::span<const float> rstd, int64_t N, int64_t C);

}  // namespace remat::kernels
