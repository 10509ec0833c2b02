// Causal multi-head self-attention, FlashAttention-2 style on CPU: tiles of kFlashBr queries x
// kFlashBc keys with an online softmax. No (T, T) buffer is ever created; the forward saves only the
// per-row log-sum-exp, and the backward recomputes the probabilities tile by tile from it.
//
// Same layout, scaling, causal mask and dropout convention as attention.h: element (b,h,i,j) is
// kept iff dropout_keep(seed, offset + ((b*NH + h)*T + i)*T + j, p), kept values scaled by
// 1/(1-p); so naive and flash kernels agree (to rounding) with dropout on.
//
// Kernels never allocate: `workspace` must hold flash_attention_workspace_floats(B, T, C, NH,
// threads) floats (8-byte aligned). That is O(tile * (HS + tile)) per thread and does not depend on
// T. The kernels run on min(omp_get_max_threads(), threads-that-fit) threads. The forward is
// parallel over (b, h, query tile), the backward over (b, h); every output element is produced by
// one thread in a fixed order, so results are bit-identical run to run and across thread counts.
// Uses AVX-512 micro-kernels when compiled with __AVX512F__, scalar loops otherwise.
#pragma once
#include <cstdint>
#include <span>

namespace remat::kernels {

inline constexpr int64_t kFlashBr = 64;  // queries per tile
inline constexpr int64_t kFlashBc = 64;  // keys per tile

int64_t flash_attention_workspace_floats(int64_t B, int64_t T, int64_t C, int64_t NH, int64_t threads);

// out (B, T, C): overwritten with the attention output (same as attention_forward's out).
// lse (B, NH, T): overwritten with log(sum_j exp(s_ij)), s_ij = q_i.k_j / sqrt(HS), j <= i.
void flash_attention_forward(std::span<float> out, std::span<float> lse, std::span<const float> qkv,
                             int64_t B, int64_t T, int64_t C, int64_t NH, float p, uint64_t seed,
                             uint64_t offset, std::span<float> workspace);

// Backward of flash_attention_forward. ADDS (+=) the gradient w.r.t. qkv into dqkv (B, T, 3C).
// out and lse are the forward's outputs; the dropout mask is regenerated from (seed, offset).
void flash_attention_backward(std::span<float> dqkv, std::span<const float> dout, std::span<const float> qkv,
                              std::span<const float> out, std::span<const float> lse, int64_t B, int64_t T,
                              int64_t C, int64_t NH, float p, uint64_t seed, uint64_t offset,
                              std::span<float> workspace);

// Tile building blocks of both attention kernels: the naive kernel (attention.cpp) runs its products
// on the same AVX-512 register-blocked micro-kernel. Single-threaded, no allocation; every output
// element is one sum over k in increasing order, so results do not depend on how rows are grouped.
namespace tile {

// Causal structure of a tile, for skipping work that only multiplies masked zeros. With
// d0 = j0 - i0 (key tile start minus query tile start), key jj and query ii interact iff ii >= jj + d0.
enum class Tri {
  None,       // tile fully below the diagonal
  LanesFrom,  // rows = keys jj, columns = queries: row jj needs columns >= jj + d0 (others left unwritten)
  ColsTo,     // rows = queries ii, columns = keys: row ii needs columns <= ii - d0; each group of 16
              // rows writes the columns its last row needs, the rest is left unwritten
  KFrom,      // rows = keys jj, k = queries: A(jj, ii) = 0 for ii < jj + d0
  KTo,        // rows = queries ii, k = keys: A(ii, jj) = 0 for jj > ii - d0
};

// C[r*ldc + n] (+= if acc, else =) sum_{k<K} A[r*sa_r + k*sa_k] * B[k*ldb + n], r < M, n < N,
// skipping per group of 16 rows what `tri` says is masked. For KFrom / KTo the skipped A entries
// must hold zeros; the results then equal the full product's (up to the sign of a zero).
void gemm(bool acc, Tri tri, int64_t d0, int64_t M, int64_t N, int64_t K, const float* A, int64_t sa_r, int64_t sa_k,
          const float* B, int64_t ldb, float* C, int64_t ldc);

// Transposed pack: XT[d*ldt + ii] = mul * X[ii*ld + d] for ii < ni, 0 for ni <= ii < Nq (Nq a
// multiple of 16), d < HS.
void pack_t(float* XT, int64_t ldt, const float* X, int64_t ld, int64_t ni, int64_t Nq, int64_t HS, float mul);

// Contiguous copy: dst[r*HS + d] = src[r*ld + d], r < n, d < HS.
void pack_rows(float* dst, const float* src, int64_t ld, int64_t n, int64_t HS);

}  // namespace tile

}  // namespace remat::kernels
