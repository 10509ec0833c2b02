#include "kernels/rope_bf16.h"

#include "kernels/rope_impl.h"

namespace remat::kernels {

// The kernel is rope_impl.h's (rope.cpp's), over bf16 storage.
void rope_qkv_bf16_forward(std::span<bf16> qkv, std::span<const bf16> q, std::span<const bf16> k,
                           std::span<const bf16> v, std::span<const float> cos, std::span<const float> sin,
                           int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HS) {
  rope_impl::forward("rope_qkv_bf16_forward", qkv, q, k, v, cos, sin, B, T, NH, KVH, HS);
}

void rope_qkv_bf16_backward(std::span<bf16> dq, std::span<bf16> dk, std::span<bf16> dv,
                            std::span<const bf16> dqkv, std::span<const float> cos, std::span<const float> sin,
                            int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HS) {
  rope_impl::backward("rope_qkv_bf16_backward", dq, dk, dv, dqkv, cos, sin, B, T, NH, KVH, HS);
}

}  // namespace remat::kernels
