// Shared building blocks of the two causal attention kernels (attention.cpp, naive; flash_attention.cpp,
// flash): an AVX-512 register-blocked matrix micro-kernel with causal-mask skipping, operand packing,
// and the vectorised dropout keep bits. Neither kernel depends on the other; both build on this.
//
// Everything here is single-threaded and never allocates. In tile::gemm every output element is one
// sum over k in increasing order, so results do not depend on how rows are grouped or on the thread
// that runs them. Uses AVX-512 when compiled with __AVX512F__, scalar loops otherwise.
#pragma once
#include <cstdint>

namespace remat::kernels {

// Dropout keep mask as bits: bit k of words[k / 64] = dropout_keep(seed, start + k, p), k < n.
// words must hold (n + 63) / 64 entries; bits past n in the last word are 0. Vectorised with
// AVX-512 where available.
void dropout_keep_bits(uint64_t* words, uint64_t seed, uint64_t start, int64_t n, float p);

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
// rs (only with acc, and tri None or KTo): C row r is first multiplied by rs[r], i.e.
// C[r][n] = rs[r] * C[r][n] + sum_k ... (the flash forward's online-softmax rescale).
void gemm(bool acc, Tri tri, int64_t d0, int64_t M, int64_t N, int64_t K, const float* A, int64_t sa_r, int64_t sa_k,
          const float* B, int64_t ldb, float* C, int64_t ldc, const float* rs = nullptr);

// Transposed pack: XT[d*ldt + ii] = mul * X[ii*ld + d] for ii < ni, 0 for ni <= ii < Nq (Nq a
// multiple of 16), d < HS.
void pack_t(float* XT, int64_t ldt, const float* X, int64_t ld, int64_t ni, int64_t Nq, int64_t HS, float mul);

// Contiguous copy: dst[r*HS + d] = src[r*ld + d], r < n, d < HS.
void pack_rows(float* dst, const float* src, int64_t ld, int64_t n, int64_t HS);

}  // namespace tile

}  // namespace remat::kernels
