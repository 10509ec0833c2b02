// Token + position embedding (as encoder.h) producing a bf16 activation: the fp32 parameters wte and
// wpe are summed in fp32 and rounded once. An EMPTY wpe / dwpe span means "no position embedding"
// (LLaMA). Backward reads a bf16 dout and ADDS into the fp32 parameter gradients (+=), in the order
// of encoder_backward: channel blocks, each element summed over (b,t) in order, so dwte/dwpe are
// bit-identical to the fp32 kernel's on the widened dout, for any thread count, with no atomics.
#pragma once
#include <cstdint>
#include <span>

#include "kernels/bf16.h"

namespace remat::kernels {

// out(B,T,C)[b,t,:] = round(wte[tokens[b*T+t], :] + wpe[t, :]) (or round(wte[tok, :]) with an empty
// wpe). wte is (V,C), wpe is (maxT,C), T <= maxT; tokens must lie in [0, V) with V = wte.size() / C.
void encoder_bf16_forward(std::span<bf16> out, const int32_t* tokens, std::span<const float> wte,
                          std::span<const float> wpe, int64_t B, int64_t T, int64_t C);

// Accumulates: dwte[tokens[b,t], :] += dout[b,t,:]; dwpe[t, :] += dout[b,t,:] (skipped when dwpe is empty).
void encoder_bf16_backward(std::span<float> dwte, std::span<float> dwpe, std::span<const bf16> dout,
                           const int32_t* tokens, int64_t B, int64_t T, int64_t C);

}  // namespace remat::kernels
