// RMSNorm over the last dimension (LLaMA / Hugging Face LlamaRMSNorm, computed in fp32): no mean
// subtraction and no bias. Backward ADDS into its outputs (+=).
// Row reductions use 16 fixed partial sums (one AVX-512 register), as layernorm does, so results do
// not depend on how the compiler vectorises and are bit-identical for any thread count.
#pragma once
#include <cstdint>
#include <span>

namespace remat::kernels {

// out(N,C) = inp * rstd * weight per row, rstd(N) = 1/sqrt(mean(inp^2) + eps). Saves rstd for backward.
// The product is evaluated as (inp * rstd) * weight, the order of LlamaRMSNorm in fp32.
// out must not alias inp (here and in rmsnorm_apply).
void rmsnorm_forward(std::span<float> out, std::span<float> rstd, std::span<const float> inp,
                     std::span<const float> weight, int64_t N, int64_t C, float eps);

// Recomputes out from the saved rstd, bit-identical to what rmsnorm_forward wrote (same code path).
void rmsnorm_apply(std::span<float> out, std::span<const float> inp, std::span<const float> weight,
                   std::span<const float> rstd, int64_t N, int64_t C);

// Accumulates dinp(N,C) and dweight(C). dinp is parallel over rows; dweight is parallel over channel
// blocks, each summed over rows in order (a second pass over inp/dout, in exchange for needing no
// scratch and being independent of the thread count), like layernorm_backward.
void rmsnorm_backward(std::span<float> dinp, std::span<float> dweight, std::span<const float> dout,
                      std::span<const float> inp, std::span<const float> weight, std::span<const float> rstd,
                      int64_t N, int64_t C);

}  // namespace remat::kernels
