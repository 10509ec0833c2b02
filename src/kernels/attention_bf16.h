// Causal multi-head / grouped-query attention on bf16 tensors, naive (materialised probabilities):
// the bf16 twin of attention.h, with the same layouts, head mapping, 1/sqrt(HS) scaling, causal mask
// and dropout convention (element (b,h,i,j) kept iff dropout_keep(seed, offset + ((b*NH + h)*T + i)*T
// + j, p), kept values scaled by 1/(1-p)).
//
// Precision. Q K^T, P V and the backward's products run on bf16 operands with fp32 accumulation
// (dot_bf16_gemm_rows, dot_bf16.h: AMX tiles where the CPU has AMX-BF16, else vdpbf16ps where it has
// AVX512_BF16, else a portable loop giving vdpbf16ps's bits). Scores, the softmax, its row sums and the softmax backward are fp32. The saved
// probabilities are bf16: they are the largest activation (B*NH*T*T), the spec counts them at two
// bytes, and P V consumes them as bf16 anyway, so fp32 storage would double the memory for nothing
// the forward uses. The backward's dS is rounded to bf16 for its two products (as bf16 trainers do);
// dK and dV are accumulated in fp32 over query tiles and heads and added to the bf16 dqkv once.
//
// Kernels never allocate: `workspace` must hold attention_bf16_workspace_floats(...) floats (8-byte
// aligned). Parallel over (b, h) in the forward and (b, kv head) in the backward; each output
// element is produced by one thread in a fixed order: bit-identical run to run and for any thread
// count on each path, and identical between the AVX512_BF16 and the portable path. The AMX path
// rounds its sums its own way, so it agrees with those two within the tolerances of the tests
// against the fp32 kernel, not bit for bit (tests/kernels/test_attention_bf16.cpp runs every path).
#pragma once
#include <cstdint>
#include <span>

#include "kernels/bf16.h"

namespace remat::kernels {

// Floats of workspace the forward, probs-only forward and backward need on `threads` threads:
// about (3*HS + 200) * T per thread (the backward's packed K and V, its fp32 dK and dV accumulators
// and one 64-query tile of scores in fp32 and bf16).
int64_t attention_bf16_workspace_floats(int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HS, int64_t threads);

// out (B, T, NH*HS): softmax(QK^T/sqrt(HS), causal) [dropout] V, rounded once.
// probs (B, NH, T, T): the pre-dropout softmax in bf16; upper triangle (j > i) written as 0.
void attention_bf16_forward(std::span<bf16> out, std::span<bf16> probs, std::span<const bf16> qkv, int64_t B,
                            int64_t T, int64_t NH, int64_t KVH, int64_t HS, float p, uint64_t seed, uint64_t offset,
                            std::span<float> workspace);

// The probabilities alone, bit for bit as attention_bf16_forward writes them (selective recompute).
void attention_bf16_probs_forward(std::span<bf16> probs, std::span<const bf16> qkv, int64_t B, int64_t T, int64_t NH,
                                  int64_t KVH, int64_t HS, std::span<float> workspace);

// ADDS (+=) the gradient w.r.t. qkv into dqkv (B, T, (NH + 2*KVH)*HS): read as bf16, the whole
// gradient added in fp32, rounded once. dout is (B, T, NH*HS); probs is the forward's.
void attention_bf16_backward(std::span<bf16> dqkv, std::span<const bf16> dout, std::span<const bf16> qkv,
                             std::span<const bf16> probs, int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HS,
                             float p, uint64_t seed, uint64_t offset, std::span<float> workspace);

}  // namespace remat::kernels
