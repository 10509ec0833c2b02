// LayerNorm over the last dimension (eps = 1e-5). Backward ADDS into its outputs (+=).
// One kernel over the storage types (layernorm.cpp instantiates them), math and statistics in fp32:
// X is the input's (and dinp's), Y the output's (and dout's):
//   (float, float): fp32;  (bf16, bf16): bf16, dinp read, added in fp32, rounded once;
//   (float, bf16): --fp32-residual, an fp32 residual stream into a bf16 block (fp32 input and dinp,
//                  bf16 output and dout): the statistics are the fp32 kernel's, out its output
//                  rounded once.
// weight and bias are the fp32 parameters (a few KiB: no bf16 copy), mean(N) and rstd(N) fp32, and so
// are dweight and dbias in every form. Row reductions use 16 fixed partial sums (one AVX-512
// register), so results do not depend on how the compiler vectorises and are bit-identical for any
// thread count.
#pragma once
#include <cstdint>
#include <span>
#include <type_traits>

#include "kernels/bf16.h"

namespace remat::kernels {

inline constexpr float kLayerNormEps = 1e-5f;

// out(N,C) = (inp - mean) * rstd * weight + bias per row; saves mean(N) and rstd(N) = 1/sqrt(var+eps)
// (biased variance) for the backward pass.
template <class X, class Y = X>
void layernorm_forward(std::span<std::type_identity_t<Y>> out, std::span<float> mean, std::span<float> rstd,
                       std::span<const X> inp, std::span<const float> weight, std::span<const float> bias, int64_t N,
                       int64_t C);

// Recomputes out from saved mean/rstd, bit-identical to what layernorm_forward wrote (same code path).
// out must not alias inp (here and in layernorm_forward).
template <class X, class Y = X>
void layernorm_apply(std::span<std::type_identity_t<Y>> out, std::span<const X> inp, std::span<const float> weight,
                     std::span<const float> bias, std::span<const float> mean, std::span<const float> rstd, int64_t N,
                     int64_t C);

// Accumulates dinp(N,C), dweight(C), dbias(C). dinp is parallel over rows; dweight/dbias are
// parallel over channel blocks, each summed over rows in order (a second pass over inp/dout, in
// exchange for needing no scratch and being independent of the thread count).
template <class X, class Y = X>
void layernorm_backward(std::span<X> dinp, std::span<float> dweight, std::span<float> dbias,
                        std::span<const std::type_identity_t<Y>> dout, std::span<const X> inp,
                        std::span<const float> weight, std::span<const float> mean, std::span<const float> rstd,
                        int64_t N, int64_t C);

}  // namespace remat::kernels
