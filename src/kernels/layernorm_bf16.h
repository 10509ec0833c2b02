// LayerNorm (as layernorm.h, eps = kLayerNormEps) producing a bf16 output, computed in fp32: the
// statistics mean(N) and rstd(N) are fp32 and saved for backward; out is rounded once. weight and bias
// are the fp32 parameters (a few KiB: no bf16 copy). Row reductions use the 16 fixed partial sums of
// the fp32 kernel, so results are bit-identical for any thread count.
// Two forms, one code (a template over the input's type):
//   layernorm_bf16_*:  bf16 input, bf16 dinp (read, added in fp32, rounded once);
//   layernorm_mixed_*: fp32 input and fp32 dinp (--fp32-residual: the residual stream stays fp32, the
//                      norm's output, and so its dout, are bf16).
// Backward ADDS into dinp, dweight and dbias (dweight, dbias fp32 in both forms).
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

// fp32 input, bf16 output: the statistics are the fp32 kernel's (same sums of the same values), and
// out is layernorm_forward's output rounded once.
void layernorm_mixed_forward(std::span<bf16> out, std::span<float> mean, std::span<float> rstd,
                             std::span<const float> inp, std::span<const float> weight, std::span<const float> bias,
                             int64_t N, int64_t C);

// Recomputes out from the saved statistics, bit-identical to layernorm_mixed_forward's (same code).
void layernorm_mixed_apply(std::span<bf16> out, std::span<const float> inp, std::span<const float> weight,
                           std::span<const float> bias, std::span<const float> mean, std::span<const float> rstd,
                           int64_t N, int64_t C);

// dinp (fp32) += the input gradient, as layernorm_backward on the widened dout.
void layernorm_mixed_backward(std::span<float> dinp, std::span<float> dweight, std::span<float> dbias,
                              std::span<const bf16> dout, std::span<const float> inp, std::span<const float> weight,
                              std::span<const float> mean, std::span<const float> rstd, int64_t N, int64_t C);

}  // namespace remat::kernels
