// Causal multi-head / grouped-query self-attention, FlashAttention-2 style on CPU: tiles of kFlashBr
// queries x kFlashBc keys with an online softmax. No (T, T) buffer is ever created; the forward saves
// only the per-row log-sum-exp, and the backward recomputes the probabilities tile by tile from it.
//
// Same layout (NH query heads, KVH key/value heads of HS floats; query head h uses kv head
// h / (NH/KVH)), scaling, causal mask and dropout convention as attention.h: element (b,h,i,j) is
// kept iff dropout_keep(seed, offset + ((b*NH + h)*T + i)*T + j, p), kept values scaled by
// 1/(1-p); so naive and flash kernels agree (to rounding) with dropout on.
//
// Kernels never allocate: `workspace` must hold flash_attention_workspace_floats(B, T, NH, KVH, HS,
// threads) floats (8-byte aligned). That is O(tile * (HS + tile)) per thread and does not depend on
// T. The kernels run on min(omp_get_max_threads(), threads-that-fit) threads. The forward is
// parallel over (b, h, query tile), the backward over (b, kv head) groups (a kv head's dK, dV sum
// its query heads' contributions in increasing head order); every output element is produced by
// one thread in a fixed order, so results are bit-identical run to run and across thread counts.
// Uses AVX-512 micro-kernels when compiled with __AVX512F__, scalar loops otherwise.
#pragma once
#include <cstdint>
#include <span>

namespace remat::kernels {

inline constexpr int64_t kFlashBr = 64;  // queries per tile
inline constexpr int64_t kFlashBc = 64;  // keys per tile

int64_t flash_attention_workspace_floats(int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HS,
                                         int64_t threads);

// out (B, T, NH*HS): overwritten with the attention output (same as attention_forward's out).
// lse (B, NH, T): overwritten with log(sum_j exp(s_ij)), s_ij = q_i.k_j / sqrt(HS), j <= i.
void flash_attention_forward(std::span<float> out, std::span<float> lse, std::span<const float> qkv,
                             int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HS, float p, uint64_t seed,
                             uint64_t offset, std::span<float> workspace);

// Backward of flash_attention_forward. ADDS (+=) the gradient w.r.t. qkv into dqkv
// (B, T, (NH + 2*KVH)*HS).
// out and lse are the forward's outputs; the dropout mask is regenerated from (seed, offset).
void flash_attention_backward(std::span<float> dqkv, std::span<const float> dout, std::span<const float> qkv,
                              std::span<const float> out, std::span<const float> lse, int64_t B, int64_t T,
                              int64_t NH, int64_t KVH, int64_t HS, float p, uint64_t seed, uint64_t offset,
                              std::span<float> workspace);

}  // namespace remat::kernels
