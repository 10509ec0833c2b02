// SwiGLU gate of the LLaMA MLP: out = silu(gate) * up elementwise, silu(x) = x * sigmoid(x) =
// x / (1 + exp(-x)). One kernel over the storage type S of the tensors, float or bf16 (instantiated
// for both in swiglu.cpp): the math is fp32 on either, a bf16 value is widened exactly and each result
// rounded once. Backward ADDS into its outputs (+=; on bf16 read, added in fp32, rounded once).
#pragma once
#include <cstdint>
#include <span>

#include "kernels/bf16.h"

namespace remat::kernels {

// out[i] = silu(gate[i]) * up[i] for i < n. Computed from exp(-|gate|) with a branch-free exp, so the
// loop vectorises and any finite gate (e.g. +-100) gives a finite silu; agrees with the
// double-precision formula to ~1e-6 relative. out may alias gate or up (elementwise).
template <class S>
void swiglu_forward(std::span<S> out, std::span<const S> gate, std::span<const S> up, int64_t n);

// Accumulates: dgate[i] += dout[i] * up[i] * silu'(gate[i]); dup[i] += dout[i] * silu(gate[i]), with
// silu'(x) = s (1 + x (1 - s)), s = sigmoid(x). dgate and dup must not alias each other or the inputs.
template <class S>
void swiglu_backward(std::span<S> dgate, std::span<S> dup, std::span<const S> dout, std::span<const S> gate,
                     std::span<const S> up, int64_t n);

}  // namespace remat::kernels
