#include "kernels/matmul.h"

#include <algorithm>

#include "core/error.h"
#include "core/tensor.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"
#include "kernels/vec_bf16.h"

namespace remat::kernels {

namespace {

constexpr int64_t kBiasBlock = 64;  // columns per dbias task: one 256-byte strip per row

// C(MxN) = op(A) op(B) [+ bias] + beta C, row-major (gemm.h's conventions), C fp32 or of A's type.
// fp32: sgemm with beta, then the bias, added to every row (a dry run skips both: sgemm has no
// scratchpad to count). The bias after a beta = 0 GEMM was measured faster than pre-filling the bias
// and running the GEMM with beta = 1 (oneDNN's beta != 0 path re-reads the whole output).
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
          float beta, float* C, int64_t ldc, const float* bias = nullptr) {
  if (shape_only()) return;
  sgemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
  if (bias) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < M; ++n)
      for (int64_t o = 0; o < N; ++o) C[n * ldc + o] += bias[o];
  }
}
// bf16: the bias fused into the primitive (added in fp32 to the fp32 accumulator, then rounded once);
// in a dry run too (it counts oneDNN's scratchpad).
template <class CT>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda, const bf16* B, int64_t ldb,
          float beta, CT* C, int64_t ldc, const float* bias = nullptr) {
  gemm_bf16(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc, bias);
}

}  // namespace

template <class S>
void matmul_forward(std::span<S> out, std::span<const S> inp, std::span<const S> weight, std::span<const float> bias,
                    int64_t N, int64_t C, int64_t OC) {
  REMAT_ASSERT(int64_t(out.size()) >= N * OC && int64_t(inp.size()) >= N * C && int64_t(weight.size()) >= C * OC,
               "matmul_forward: span too small");
  REMAT_ASSERT(bias.empty() || int64_t(bias.size()) >= OC, "matmul_forward: bias too small");
  gemm(false, false, N, OC, C, inp.data(), C, weight.data(), OC, 0.0f, out.data(), OC,
       bias.empty() ? nullptr : bias.data());
}

template <class S>
void matmul_backward(std::span<S> dinp, std::span<float> dweight, std::span<float> dbias, std::span<const S> dout,
                     std::span<const S> inp, std::span<const S> weight, int64_t N, int64_t C, int64_t OC,
                     bool dinp_overwrite) {
  REMAT_ASSERT(int64_t(dout.size()) >= N * OC && int64_t(inp.size()) >= N * C && int64_t(weight.size()) >= C * OC &&
                   int64_t(dweight.size()) >= C * OC,
               "matmul_backward: span too small");
  // forward was: out = inp @ W + b, so dinp += dout @ W^T
  if (!dinp.empty()) {
    REMAT_ASSERT(int64_t(dinp.size()) >= N * C, "matmul_backward: dinp too small");
    gemm(false, true, N, C, OC, dout.data(), OC, weight.data(), OC, dinp_overwrite ? 0.0f : 1.0f, dinp.data(), C);
  }
  // ... and dW += inp^T @ dout, in fp32
  gemm(true, false, C, OC, N, inp.data(), C, dout.data(), OC, 1.0f, dweight.data(), OC);
  // ... and db += sum over rows of dout, in fp32. Parallel over column blocks, each block summed over
  // rows in order into a local accumulator: the result does not depend on the thread count.
  if (!dbias.empty() && !shape_only()) {
    REMAT_ASSERT(int64_t(dbias.size()) >= OC, "matmul_backward: dbias too small");
    const int64_t nblocks = (OC + kBiasBlock - 1) / kBiasBlock;
#pragma omp parallel for schedule(static)
    for (int64_t blk = 0; blk < nblocks; ++blk) {
      const int64_t o0 = blk * kBiasBlock, len = std::min(kBiasBlock, OC - o0);
      float acc[kBiasBlock] = {};
      for (int64_t n = 0; n < N; ++n) {
        const S* row = dout.data() + n * OC + o0;
        for (int64_t j = 0; j < len; ++j) acc[j] += vec_bf16::widen(row[j]);
      }
      for (int64_t j = 0; j < len; ++j) dbias[o0 + j] += acc[j];
    }
  }
}

template <class S>
void matmul_nt_forward(std::span<S> out, std::span<const S> inp, std::span<const S> weight, int64_t N, int64_t C,
                       int64_t OC) {
  REMAT_ASSERT(int64_t(out.size()) >= N * OC && int64_t(inp.size()) >= N * C && int64_t(weight.size()) >= OC * C,
               "matmul_nt_forward: span too small");
  gemm(false, true, N, OC, C, inp.data(), C, weight.data(), C, 0.0f, out.data(), OC);
}

template <class S>
void matmul_nt_backward(std::span<S> dinp, std::span<float> dweight, std::span<const S> dout, std::span<const S> inp,
                        std::span<const S> weight, int64_t N, int64_t C, int64_t OC, bool dinp_overwrite) {
  REMAT_ASSERT(int64_t(dout.size()) >= N * OC && int64_t(inp.size()) >= N * C && int64_t(weight.size()) >= OC * C &&
                   int64_t(dweight.size()) >= OC * C,
               "matmul_nt_backward: span too small");
  // forward was: out = inp @ W^T, so dinp += dout @ W
  if (!dinp.empty()) {
    REMAT_ASSERT(int64_t(dinp.size()) >= N * C, "matmul_nt_backward: dinp too small");
    gemm(false, false, N, C, OC, dout.data(), OC, weight.data(), C, dinp_overwrite ? 0.0f : 1.0f, dinp.data(), C);
  }
  // ... and dW += dout^T @ inp, in fp32
  gemm(true, false, OC, C, N, dout.data(), OC, inp.data(), C, 1.0f, dweight.data(), C);
}

#define REMAT_MATMUL_INSTANTIATE(S)                                                                                   \
  template void matmul_forward(std::span<S>, std::span<const S>, std::span<const S>, std::span<const float>, int64_t, \
                               int64_t, int64_t);                                                                     \
  template void matmul_backward(std::span<S>, std::span<float>, std::span<float>, std::span<const S>,                 \
                                std::span<const S>, std::span<const S>, int64_t, int64_t, int64_t, bool);             \
  template void matmul_nt_forward(std::span<S>, std::span<const S>, std::span<const S>, int64_t, int64_t, int64_t);   \
  template void matmul_nt_backward(std::span<S>, std::span<float>, std::span<const S>, std::span<const S>,            \
                                   std::span<const S>, int64_t, int64_t, int64_t, bool);
REMAT_MATMUL_INSTANTIATE(float)
REMAT_MATMUL_INSTANTIATE(bf16)

}  // namespace remat::kernels
