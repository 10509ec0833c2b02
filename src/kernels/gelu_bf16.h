// GELU (tanh approximation, as gelu.h) on bf16 tensors, computed in fp32: each output is the fp32
// twin's formula on the widened input, rounded once. Backward ADDS into its output (+=, read as
// bf16, added in fp32, rounded once) or writes it when told the output is fresh.
#pragma once
#include <cstdint>
#include <span>

#include "kernels/bf16.h"

namespace remat::kernels {

void gelu_bf16_forward(std::span<bf16> out, std::span<const bf16> inp, int64_t N);

void gelu_bf16_backward(std::span<bf16> dinp, std::span<const bf16> inp, std::span<const bf16> dout, int64_t N,
                        bool overwrite = false);

}  // namespace remat::kernels
