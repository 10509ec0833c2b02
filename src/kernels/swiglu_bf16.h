// SwiGLU gate (as swiglu.h) on bf16 tensors, computed in fp32: out = silu(gate) * up, each value the
// fp32 twin's formula on the widened inputs, rounded once. Backward ADDS into its outputs (+=, read
// as bf16, added in fp32, rounded once).
#pragma once
#include <cstdint>
#include <span>

#include "kernels/bf16.h"

namespace remat::kernels {

// out may alias gate or up (elementwise).
void swiglu_bf16_forward(std::span<bf16> out, std::span<const bf16> gate, std::span<const bf16> up, int64_t n);

// dgate and dup must not alias each other or the inputs.
void swiglu_bf16_backward(std::span<bf16> dgate, std::span<bf16> dup, std::span<const bf16> dout,
                          std::span<const bf16> gate, std::span<const bf16> up, int64_t n);

}  // namespace remat::kernels
