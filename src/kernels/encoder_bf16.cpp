#include "kernels/encoder_bf16.h"

#include "kernels/encoder_impl.h"

namespace remat::kernels {

// The kernel is encoder_impl.h's (encoder.cpp's), over bf16 storage.
void encoder_bf16_forward(std::span<bf16> out, const int32_t* tokens, std::span<const float> wte,
                          std::span<const float> wpe, int64_t B, int64_t T, int64_t C) {
  encoder_impl::forward("encoder_bf16_forward", out, tokens, wte, wpe, B, T, C);
}

void encoder_bf16_backward(std::span<float> dwte, std::span<float> dwpe, std::span<const bf16> dout,
                           const int32_t* tokens, int64_t B, int64_t T, int64_t C) {
  encoder_impl::backward("encoder_bf16_backward", dwte, dwpe, dout, tokens, B, T, C);
}

}  // namespace remat::kernels
