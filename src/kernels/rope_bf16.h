// Rotary position embeddings on bf16 tensors (as rope.h: Hugging Face "rotate_half" pairs
// (x[i], x[i + HS/2]), fused with packing q, k, v into the attention's qkv layout). The cos/sin
// tables stay fp32 (rope_table in rope.h); each rotated value is rope.cpp's expression in fp32,
// rounded once, and v is copied bit for bit.
// Backward ADDS into its outputs (+=; read as bf16, added in fp32, rounded once). Every output element
// is written by exactly one thread with a fixed expression: bit-identical for any thread count.
#pragma once
#include <cstdint>
#include <span>

#include "kernels/bf16.h"

namespace remat::kernels {

// q (B,T,NH*HS), k and v (B,T,KVH*HS) -> qkv (B,T,(NH+2*KVH)*HS), [q heads | k heads | v heads] per
// token; q and k rotated per head by angle(t, i), v copied. qkv must not alias q, k or v.
void rope_qkv_bf16_forward(std::span<bf16> qkv, std::span<const bf16> q, std::span<const bf16> k,
                           std::span<const bf16> v, std::span<const float> cos, std::span<const float> sin,
                           int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HS);

// dq += R^T dqkv_q, dk += R^T dqkv_k, dv += dqkv_v (R^T the rotation by -angle). Any of dq/dk/dv may be
// empty: that gradient is skipped.
void rope_qkv_bf16_backward(std::span<bf16> dq, std::span<bf16> dk, std::span<bf16> dv,
                            std::span<const bf16> dqkv, std::span<const float> cos, std::span<const float> sin,
                            int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HS);

}  // namespace remat::kernels
