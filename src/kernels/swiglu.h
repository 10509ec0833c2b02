// SwiGLU gate of the LLaMA MLP: out = silu(gate) * up elementwise, silu(x) = x * sigmoid(x) =
// x / (1 + exp(-x)). Backward ADDS into its outputs (+=).
#pragma once
#include <cstdint>
#include <span>

namespace remat::kernels {

// out[i] = silu(gate[i]) * up[i] for i < n. Computed from exp(-|gate|) with a branch-free exp, so the
// loop vectorises and any finite gate (e.g. +-100) gives a finite silu; agrees with the
// double-precision formula to ~1e-6 relative. out may alias gate or up (elementwise).
void swiglu_forward(std::span<float> out, std::span<const float> gate, std::span<const float> up, int64_t n);

// Accumulates: dgate[i] += dout[i] * up[i] * silu'(gate[i]); dup[i] += dout[i] * silu(gate[i]), with
// silu'(x) = s (1 + x (1 - s)), s = sigmoid(x). dgate and dup must not alias each other or the inputs.
void swiglu_backward(std::span<float> dgate, std::span<float> dup, std::span<const float> dout,
                     std::span<const float> gate, std::span<const float> up, int64_t n);

}  // namespace remat::kernels
