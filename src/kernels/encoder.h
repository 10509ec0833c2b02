// Token + position embedding (GPT-2 wte/wpe), or token embedding alone (LLaMA, whose positions come
// from RoPE inside attention): an EMPTY wpe / dwpe span means "no position embedding".
// Backward ADDS into its outputs (+=).
#pragma once
#include <cstdint>
#include <span>

namespace remat::kernels {

// out(B,T,C)[b,t,:] = wte[tokens[b*T+t], :] + wpe[t, :]. wte is (V,C), wpe is (maxT,C), T <= maxT.
// With an empty wpe: out[b,t,:] = wte[tokens[b*T+t], :]. Tokens must lie in [0, V) with V = wte.size() / C.
void encoder_forward(std::span<float> out, const int32_t* tokens, std::span<const float> wte,
                     std::span<const float> wpe, int64_t B, int64_t T, int64_t C);

// Accumulates: dwte[tokens[b,t], :] += dout[b,t,:]; dwpe[t, :] += dout[b,t,:] (skipped when dwpe is empty).
// Parallel over channel blocks, each element summed over (b,t) in order: bit-identical for any
// thread count, with no atomics even when a token repeats.
void encoder_backward(std::span<float> dwte, std::span<float> dwpe, std::span<const float> dout,
                      const int32_t* tokens, int64_t B, int64_t T, int64_t C);

}  // namespace remat::kernels
