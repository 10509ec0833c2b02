// LayerNorm (as layernorm.h, eps = kLayerNormEps) over bf16 rows, computed in fp32: the statistics
// mean(N) and rstd(N) are fp32 and saved for backward; out is rounded once. weight and bias are the
// fp32 parameters (a few KiB: no bf16 copy). Row reductions use the 16 fixed partial sums of the
// fp32 kernel, so results are bit-identical for any thread count.
// Backward ADDS: dinp (bf16, read, added in fp32, rounded once), dweight and dbias (fp32).
#pragma once
#include <cstdint>
#include <span>

#include "kernels/bf16.h"

namespace remat::kernels {

void layernorm_bf16_forward(std::span<bf16> out, std::span<float> mean, std::span<float> rstd,
                            std::span<const bf16> inp, std::span<const float> weight, std::span<const float> bias,
                            int64_t N, int64_t C);

// Recomputes out from the saved statistics, bit-identical to layernorm_bf16_forward's (same code).
// out must not alias inp (here and in the forward).
void layernorm_bf16_apply(std::span<bf16> out, std::span<const bf16> inp, std::span<const float> weight,
                          std::span<const float> bias, std::span<const float> mean, std::span<const float> rstd,
                          int64_t N, int64_t C);

void layernorm_bf16_backward(std::span<bf16> dinp, std::span<float> dweight, std::span<float> dbias,
                             std::span<const bf16> dout, std::span<const bf16> inp, std::span<const float> weight,
                             std::span<const float> mean, std::span<const float> rstd, int64_t N, int64_t C);

}  // namespace remat::kernels
