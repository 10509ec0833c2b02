// RMSNorm (as rmsnorm.h) producing a bf16 output, computed in fp32: rstd(N) is fp32 and saved for
// backward; out = (inp * rstd) * weight is rounded once. weight is the fp32 parameter. Row reductions
// use the 16 fixed partial sums of the fp32 kernel: bit-identical for any thread count.
// Two forms, one code (a template over the input's type):
//   rmsnorm_bf16_*:  bf16 input, bf16 dinp (read, added in fp32, rounded once);
//   rmsnorm_mixed_*: fp32 input and fp32 dinp (--fp32-residual: the residual stream stays fp32, the
//                    norm's output, and so its dout, are bf16).
// Backward ADDS into dinp and dweight (dweight fp32 in both forms).
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

// fp32 input, bf16 output: rstd is the fp32 kernel's (same sums of the same values), out is
// rmsnorm_forward's output rounded once.
void rmsnorm_mixed_forward(std::span<bf16> out, std::span<float> rstd, std::span<const float> inp,
                           std::span<const float> weight, int64_t N, int64_t C, float eps);

// Recomputes out from the saved rstd, bit-identical to rmsnorm_mixed_forward's (same code).
void rmsnorm_mixed_apply(std::span<bf16> out, std::span<const float> inp, std::span<const float> weight,
                         std::span<const float> rstd, int64_t N, int64_t C);

// dinp (fp32) += the input gradient, as rmsnorm_backward on the widened dout.
void rmsnorm_mixed_backward(std::span<float> dinp, std::span<float> dweight, std::span<const bf16> dout,
                            std::span<const float> inp, std::span<const float> weight, std::span<const float> rstd,
                            int64_t N, int64_t C);

}  // namespace remat::kernels
