// Causal multi-head / grouped-query self-attention, naive ("materialised scores") version. This is
// the reference for flash_attention.h and also the default fast path: per (b, h) and tile of 64
// queries it runs Q K^T and P V on an AVX-512 register-blocked micro-kernel (attention_tile.h, shared
// with the flash kernel), skipping the keys past each group of 16 queries, so the causal mask wastes
// at most a 16 x 16 triangle per group.
//
// Layout: NH query heads and KVH key/value heads of HS floats each (NH % KVH == 0, any HS >= 1).
// qkv is (B, T, (NH + 2*KVH)*HS): per token the NH query heads, then the KVH key heads, then the KVH
// value heads. Query head h attends with key/value head h / (NH/KVH) (grouped-query attention,
// Hugging Face's repeat_kv convention); KVH == NH is multi-head attention and, with HS = C/NH, the
// GPT-2 layout qkv = (B, T, 3C). out is (B, T, NH*HS), head h at channels h*HS... Scores are scaled by
// 1/sqrt(HS); query t attends keys 0..t.
//
// Attention dropout: probability element (b,h,i,j) is kept iff
//   dropout_keep(seed, offset + ((b*NH + h)*T + i)*T + j, p)
// and kept values are scaled by 1/(1-p). The mask is a pure function of (seed, offset), so the
// backward pass regenerates it instead of storing it (dropout_keep_bits, attention_tile.h);
// flash_attention uses the same index. p = 0 disables dropout.
//
// Kernels never allocate: scratch comes from `workspace`, which must hold at least
// attention_workspace_floats(B, T, NH, KVH, HS, threads) floats. The kernels run on
// min(omp_get_max_threads(), threads-that-fit-in-workspace) OpenMP threads. The forward is split
// over (b, h) pairs, the backward over (b, kv head) groups: every output element is produced by one
// thread in a fixed order, so results are bit-identical run to run (and do not depend on the thread
// count). The backward accumulates dK, dV of a kv head into dqkv one query tile at a time, its query
// heads in increasing order.
#pragma once
#include <cstdint>
#include <span>

namespace remat::kernels {

// Floats of workspace that attention_forward / attention_backward need when run on `threads`
// threads: about (2*HS + 128) * T per thread (packed K, V and two 64-query rows of scores).
int64_t attention_workspace_floats(int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HS, int64_t threads);

// out   (B, T, NH*HS)  : overwritten with softmax(QK^T/sqrt(HS), causal) [dropout] V.
// probs (B, NH, T, T)  : overwritten with the pre-dropout softmax; upper triangle (j > i) written as 0.
void attention_forward(std::span<float> out, std::span<float> probs, std::span<const float> qkv,
                       int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HS, float p, uint64_t seed,
                       uint64_t offset, std::span<float> workspace);

// The probabilities alone, bit for bit as attention_forward writes them: Q K^T, the causal mask and
// the softmax, with no P V and no output (what selective recomputation rebuilds in backward; the
// probabilities are pre-dropout, so the dropout mask plays no part). workspace must hold at least
// attention_probs_workspace_floats(T, HS, threads) floats: about HS * T per thread (the packed K^T).
int64_t attention_probs_workspace_floats(int64_t T, int64_t HS, int64_t threads);
void attention_probs_forward(std::span<float> probs, std::span<const float> qkv, int64_t B, int64_t T, int64_t NH,
                             int64_t KVH, int64_t HS, std::span<float> workspace);

// Backward of attention_forward. ADDS (+=) the gradient w.r.t. qkv into dqkv (B, T, (NH+2*KVH)*HS);
// dout is (B, T, NH*HS); probs is the forward's output. The dropout mask is regenerated from
// (seed, offset).
void attention_backward(std::span<float> dqkv, std::span<const float> dout, std::span<const float> qkv,
                        std::span<const float> probs, int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HS,
                        float p, uint64_t seed, uint64_t offset, std::span<float> workspace);

}  // namespace remat::kernels
