// GELU, tanh approximation as in GPT-2: gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// One kernel over the storage type S of the tensors, float or bf16 (instantiated for both in
// gelu.cpp): the math is fp32 on either, a bf16 value is widened exactly and each result rounded once.
// Backward ADDS into its output (+=; on bf16 read, added in fp32, rounded once), or writes it when
// told the output is fresh.
#pragma once
#include <cstdint>
#include <span>

#include "kernels/bf16.h"

namespace remat::kernels {

// out[i] = gelu(inp[i]) for i < N. Computed as x * sigmoid(2u) (the same function as 0.5x(1+tanh u))
// with a branch-free exp, so the loop vectorises; agrees with the double-precision formula to ~1e-6
// relative.
template <class S>
void gelu_forward(std::span<S> out, std::span<const S> inp, int64_t N);

// Accumulates dinp[i] += gelu'(inp[i]) * dout[i]; with `overwrite`, sets dinp[i] = gelu'(inp[i]) * dout[i]
// (dinp's old contents are ignored: a fresh gradient needs no zero fill).
template <class S>
void gelu_backward(std::span<S> dinp, std::span<const S> inp, std::span<const S> dout, int64_t N,
                   bool overwrite = false);

}  // namespace remat::kernels
