// RMSNorm over the last dimension (LLaMA / Hugging Face LlamaRMSNorm, computed in fp32): no mean
// subtraction and no bias. Backward ADDS into its outputs (+=).
// One kernel over the storage types (rmsnorm.cpp instantiates them), math and rstd in fp32: X is the
// input's (and dinp's), Y the output's (and dout's):
//   (float, float): fp32;  (bf16, bf16): bf16, dinp read, added in fp32, rounded once;
//   (float, bf16): --fp32-residual, an fp32 residual stream into a bf16 block (fp32 input and dinp,
//                  bf16 output and dout): rstd is the fp32 kernel's, out its output rounded once.
// weight and dweight are fp32 in every form. Row reductions use 16 fixed partial sums (one AVX-512
// register), as layernorm does, so results do not depend on how the compiler vectorises and are
// bit-identical for any thread count.
#pragma once
#include <cstdint>
#include <span>
#include <type_traits>

#include "kernels/bf16.h"

namespace remat::kernels {

// out(N,C) = inp * rstd * weight per row, rstd(N) = 1/sqrt(mean(inp^2) + eps). Saves rstd for backward.
// The product is evaluated as (inp * rstd) * weight, the order of LlamaRMSNorm in fp32.
// out must not alias inp (here and in rmsnorm_apply).
template <class X, class Y = X>
void rmsnorm_forward(std::span<std::type_identity_t<Y>> out, std::span<float> rstd, std::span<const X> inp,
                     std::span<const float> weight, int64_t N, int64_t C, float eps);

// Recomputes out from the saved rstd, bit-identical to what rmsnorm_forward wrote (same code path).
template <class X, class Y = X>
void rmsnorm_apply(std::span<std::type_identity_t<Y>> out, std::span<const X> inp, std::span<const float> weight,
                   std::span<const float> rstd, int64_t N, int64_t C);

// Accumulates dinp(N,C) and dweight(C). dinp is parallel over rows; dweight is parallel over channel
// blocks, each summed over rows in order (a second pass over inp/dout, in exchange for needing no
// scratch and being independent of the thread count), like layernorm_backward.
template <class X, class Y = X>
void rmsnorm_backward(std::span<X> dinp, std::span<float> dweight, std::span<const std::type_identity_t<Y>> dout,
                      std::span<const X> inp, std::span<const float> weight, std::span<const float> rstd, int64_t N,
                      int64_t C);

}  // namespace remat::kernels
