// Causal multi-head / grouped-query attention on bf16 tensors, FlashAttention-2 style: the bf16 twin
// of flash_attention.h (same layouts, scaling, mask, dropout convention and tiles of kFlashBr queries
// x kFlashBc keys with an online softmax). No (T, T) buffer: the forward saves only the fp32 per-row
// log-sum-exp, the backward recomputes the probabilities tile by tile from it.
//
// Precision as attention_bf16.h: products on bf16 pairs with fp32 accumulation (dot_bf16_gemm_rows:
// AMX tiles, vdpbf16ps or the portable loop with vdpbf16ps's bits); scores, the online max and sum, lse, and the
// softmax backward in fp32. The probabilities of a tile are rounded to bf16 for P V and dV, and dS
// for dQ and dK. The backward's row term D_i = dO_i . O_i is taken from the bf16 output.
//
// Workspace: the forward needs O(tile * (HS + tile)) floats per thread, independent of T. The
// backward also holds a kv head's K and V packed for the products (1.5 * T * HS floats per thread)
// and accumulates its dK and dV in fp32 (2 * T * HS floats, stored transposed) before adding them
// to the bf16 dqkv once. Forward parallel over (b, h, query tile),
// backward over (b, kv head); every output element is produced by one thread in a fixed order:
// bit-identical run to run and for any thread count on each path, and between the AVX512_BF16 and
// portable paths; the AMX path agrees with those two to the tests' tolerances, not bit for bit.
#pragma once
#include <cstdint>
#include <span>

#include "kernels/bf16.h"

namespace remat::kernels {

int64_t flash_attention_bf16_workspace_floats(int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HS,
                                              int64_t threads);

// out (B, T, NH*HS): the attention output, rounded once. lse (B, NH, T): log(sum_j exp(s_ij)), fp32.
void flash_attention_bf16_forward(std::span<bf16> out, std::span<float> lse, std::span<const bf16> qkv, int64_t B,
                                  int64_t T, int64_t NH, int64_t KVH, int64_t HS, float p, uint64_t seed,
                                  uint64_t offset, std::span<float> workspace);

// ADDS (+=) the gradient w.r.t. qkv into dqkv (read as bf16, added in fp32, rounded once). out and
// lse are the forward's; the dropout mask is regenerated from (seed, offset).
void flash_attention_bf16_backward(std::span<bf16> dqkv, std::span<const bf16> dout, std::span<const bf16> qkv,
                                   std::span<const bf16> out, std::span<const float> lse, int64_t B, int64_t T,
                                   int64_t NH, int64_t KVH, int64_t HS, float p, uint64_t seed, uint64_t offset,
                                   std::span<float> workspace);

}  // namespace remat::kernels
