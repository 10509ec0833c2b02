#include "kernels/encoder.h"

#include "kernels/encoder_impl.h"

namespace remat::kernels {

// The kernel is encoder_impl.h's, over fp32 storage.
void encoder_forward(std::span<float> out, const int32_t* tokens, std::span<const float> wte,
                     std::span<const float> wpe, int64_t B, int64_t T, int64_t C) {
  encoder_impl::forward("encoder_forward", out, tokens, wte, wpe, B, T, C);
}

void encoder_backward(std::span<float> dwte, std::span<float> dwpe, std::span<const float> dout,
                      const int32_t* tokens, int64_t B, int64_t T, int64_t C) {
  encoder_impl::backward("encoder_backward", dwte, dwpe, dout, tokens, B, T, C);
}

}  // namespace remat::kernels
