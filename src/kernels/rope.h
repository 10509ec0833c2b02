// Rotary position embeddings (RoPE), Hugging Face LLaMA "rotate_half" convention: each head of size HS
// is split in halves, and the pair (x[i], x[i + HS/2]) is rotated by angle(t, i) for i < HS/2 (not the
// interleaved (x[2i], x[2i+1]) pairs of the original paper / Meta's reference code).
// The rotation is fused with packing q, k, v into the one qkv buffer the attention kernels read.
// One kernel over the storage type S of q, k, v and their gradients, float or bf16 (instantiated for
// both in rope.cpp); the cos/sin tables stay fp32. The math is fp32 on either: fp32 storage is rotated
// in place of its output, bf16 is widened exactly and each rotated value rounded once; v is copied
// bit for bit. Backward ADDS into its outputs (+=; on bf16 read, added in fp32, rounded once). Every
// output element is written by exactly one thread with a fixed expression: bit-identical for any
// thread count.
#pragma once
#include <cstdint>
#include <span>

#include "kernels/bf16.h"

namespace remat::kernels {

// cos/sin tables (T, HS/2): angle(t, i) = t * theta^(-2i/HS), computed in double and rounded to float
// (LLaMA: theta = 10000). A table built for maxT rows serves any T <= maxT (row t is the same).
void rope_table(std::span<float> cos, std::span<float> sin, int64_t T, int64_t HS, float theta);

// q (B,T,NH*HS), k and v (B,T,KVH*HS) -> qkv (B,T,(NH+2*KVH)*HS) laid out as [q heads | k heads | v heads]
// per token (NH a multiple of KVH for grouped-query attention; the kernel itself does not care).
// q and k get rotated per head: for i < HS/2, with c = cos(t,i), s = sin(t,i),
//   x'[i] = x[i] c - x[i+HS/2] s,   x'[i+HS/2] = x[i+HS/2] c + x[i] s.
// v is copied. At t = 0 (c = 1, s = 0) q and k come out unchanged (up to the sign of a zero).
// qkv must not alias q, k or v.
template <class S>
void rope_qkv_forward(std::span<S> qkv, std::span<const S> q, std::span<const S> k, std::span<const S> v,
                      std::span<const float> cos, std::span<const float> sin, int64_t B, int64_t T, int64_t NH,
                      int64_t KVH, int64_t HS);

// Backward: dq += R^T dqkv_q, dk += R^T dqkv_k, dv += dqkv_v, R^T being the rotation by -angle:
//   dx[i] += dy[i] c + dy[i+HS/2] s,   dx[i+HS/2] += dy[i+HS/2] c - dy[i] s.
// Any of dq/dk/dv may be empty: that gradient is skipped (e.g. a frozen or recomputed input).
template <class S>
void rope_qkv_backward(std::span<S> dq, std::span<S> dk, std::span<S> dv, std::span<const S> dqkv,
                       std::span<const float> cos, std::span<const float> sin, int64_t B, int64_t T, int64_t NH,
                       int64_t KVH, int64_t HS);

}  // namespace remat::kernels
