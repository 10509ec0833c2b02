// RMSNorm (as rmsnorm.h) over bf16 rows, computed in fp32: rstd(N) is fp32 and saved for backward;
// out = (inp * rstd) * weight is rounded once. weight is the fp32 parameter. Row reductions use the
// 16 fixed partial sums of the fp32 kernel: bit-identical for any thread count.
// Backward ADDS: dinp (bf16, read, added in fp32, rounded once) and dweight (fp32).
#pragma once
#include <cstdint>
#include <span>

#include "kernels/bf16.h"

namespace remat::kernels {

// out must not alias inp (here and in rmsnorm_bf16_apply).
void rmsnorm_bf16_forward(std::span<bf16> out, std::span<float> rstd, std::span<const bf16> inp,
                          std::span<const float> weight, int64_t N, int64_t C, float eps);

// Recomputes out from the saved rstd, bit-identical to rmsnorm_bf16_forward's (same code).
void rmsnorm_bf16_apply(std::span<bf16> out, std::span<const bf16> inp, std::span<const float> weight,
                        std::span<const float> rstd, int64_t N, int64_t C);

void rmsnorm_bf16_backward(std::span<bf16> dinp, std::span<float> dweight, std::span<const bf16> dout,
                           std::span<const bf16> inp, std::span<const float> weight, std::span<const float> rstd,
                           int64_t N, int64_t C);

}  // namespace remat::kernels
