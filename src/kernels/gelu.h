// GELU, tanh approximation as in GPT-2: gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// Backward ADDS into its output (+=), or writes it when told the output is fresh.
#pragma once
#include <cstdint>
#include <span>

namespace remat::kernels {

// out[i] = gelu(inp[i]) for i < N. Computed as x * sigmoid(2u) (the same function as 0.5x(1+tanh u))
// with a branch-free exp, so the loop vectorises; agrees with the double-precision formula to ~1e-6
// relative.
void gelu_forward(std::span<float> out, std::span<const float> inp, int64_t N);

// Accumulates dinp[i] += gelu'(inp[i]) * dout[i]; with `overwrite`, sets dinp[i] = gelu'(inp[i]) * dout[i]
// (dinp's old contents are ignored: a fresh gradient needs no zero fill).
void gelu_backward(std::span<float> dinp, std::span<const float> inp, std::span<const float> dout, int64_t N,
                   bool overwrite = false);

}  // namespace remat::kernels
