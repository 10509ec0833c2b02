// Token + position embedding (GPT-2 wte/wpe), or token embedding alone (LLaMA, whose positions come
// from RoPE inside attention): an EMPTY wpe / dwpe span means "no position embedding".
// One kernel over the storage type S of the activation and its gradient, float or bf16 (instantiated
// for both in encoder.cpp). The parameters and their gradients are fp32 on either; the sum is fp32,
// rounded once on bf16. Backward ADDS into its outputs (+=), reading dout widened exactly, in one
// accumulation order, so dwte/dwpe are bit-identical across the two storage types on the same
// (widened) dout.
#pragma once
#include <cstdint>
#include <span>

#include "kernels/bf16.h"

namespace remat::kernels {

// out(B,T,C)[b,t,:] = wte[tokens[b*T+t], :] + wpe[t, :]. wte is (V,C), wpe is (maxT,C), T <= maxT.
// With an empty wpe: out[b,t,:] = wte[tokens[b*T+t], :]. Tokens must lie in [0, V) with V = wte.size() / C.
template <class S>
void encoder_forward(std::span<S> out, const int32_t* tokens, std::span<const float> wte, std::span<const float> wpe,
                     int64_t B, int64_t T, int64_t C);

// Accumulates: dwte[tokens[b,t], :] += dout[b,t,:]; dwpe[t, :] += dout[b,t,:] (skipped when dwpe is empty).
// Parallel over channel blocks, each element summed over (b,t) in order: bit-identical for any
// thread count, with no atomics even when a token repeats.
template <class S>
void encoder_backward(std::span<float> dwte, std::span<float> dwpe, std::span<const S> dout, const int32_t* tokens,
                      int64_t B, int64_t T, int64_t C);

}  // namespace remat::kernels
