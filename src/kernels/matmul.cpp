#include "kernels/matmul.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/gemm.h"

namespace remat::kernels {

namespace {
constexpr int64_t kBiasBlock = 64;  // columns per dbias task: one 256-byte strip per row
}

void matmul_forward(std::span<float> out, std::span<const float> inp, std::span<const float> weight,
                    std::span<const float> bias, int64_t N, int64_t C, int64_t OC) {
  REMAT_ASSERT(int64_t(out.size()) >= N * OC && int64_t(inp.size()) >= N * C &&
                   int64_t(weight.size()) >= C * OC, "matmul_forward: span too small");
  REMAT_ASSERT(bias.empty() || int64_t(bias.size()) >= OC, "matmul_forward: bias too small");
  // GEMM with beta = 0, then the bias: measured faster than pre-filling the bias and running the
  // GEMM with beta = 1 (oneDNN's beta != 0 path re-reads the whole output).
  sgemm(false, false, N, OC, C, 1.0f, inp.data(), C, weight.data(), OC, 0.0f, out.data(), OC);
  if (!bias.empty()) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < OC; ++o) out[n * OC + o] += bias[o];
  }
}

void matmul_backward(std::span<float> dinp, std::span<float> dweight, std::span<float> dbias,
                     std::span<const float> dout, std::span<const float> inp, std::span<const float> weight,
                     int64_t N, int64_t C, int64_t OC, bool dinp_overwrite) {
  REMAT_ASSERT(int64_t(dout.size()) >= N * OC && int64_t(inp.size()) >= N * C &&
                   int64_t(weight.size()) >= C * OC && int64_t(dweight.size()) >= C * OC,
               "matmul_backward: span too small");
  // forward was: out = inp @ W + b, so dinp += dout @ W^T
  if (!dinp.empty()) {
    REMAT_ASSERT(int64_t(dinp.size()) >= N * C, "matmul_backward: dinp too small");
    sgemm(false, true, N, C, OC, 1.0f, dout.data(), OC, weight.data(), OC, dinp_overwrite ? 0.0f : 1.0f, dinp.data(), C);
  }
  // ... and dW += inp^T @ dout
  sgemm(true, false, C, OC, N, 1.0f, inp.data(), C, dout.data(), OC, 1.0f, dweight.data(), OC);
  // ... and db += sum over rows of dout. Parallel over column blocks, each block summed over rows in
  // order into a local accumulator: the result does not depend on the thread count.
  if (!dbias.empty()) {
    REMAT_ASSERT(int64_t(dbias.size()) >= OC, "matmul_backward: dbias too small");
    const int64_t nblocks = (OC + kBiasBlock - 1) / kBiasBlock;
#pragma omp parallel for schedule(static)
    for (int64_t blk = 0; blk < nblocks; ++blk) {
      const int64_t o0 = blk * kBiasBlock, len = std::min(kBiasBlock, OC - o0);
      float acc[kBiasBlock] = {};
      for (int64_t n = 0; n < N; ++n) {
        const float* row = dout.data() + n * OC + o0;
        for (int64_t j = 0; j < len; ++j) acc[j] += row[j];
      }
      for (int64_t j = 0; j < len; ++j) dbias[o0 + j] += acc[j];
    }
  }
}

void matmul_nt_forward(std::span<float> out, std::span<const float> inp, std::span<const float> weight,
                       int64_t N, int64_t C, int64_t OC) {
  REMAT_ASSERT(int64_t(out.size()) >= N * OC && int64_t(inp.size()) >= N * C &&
                   int64_t(weight.size()) >= OC * C, "matmul_nt_forward: span too small");
  sgemm(false, true, N, OC, C, 1.0f, inp.data(), C, weight.data(), C, 0.0f, out.data(), OC);
}

void matmul_nt_backward(std::span<float> dinp, std::span<float> dweight, std::span<const float> dout,
                        std::span<const float> inp, std::span<const float> weight, int64_t N, int64_t C,
                        int64_t OC, bool dinp_overwrite) {
  REMAT_ASSERT(int64_t(dout.size()) >= N * OC && int64_t(inp.size()) >= N * C &&
                   int64_t(weight.size()) >= OC * C && int64_t(dweight.size()) >= OC * C,
               "matmul_nt_backward: span too small");
  // forward was: out = inp @ W^T, so dinp += dout @ W
  if (!dinp.empty()) {
    REMAT_ASSERT(int64_t(dinp.size()) >= N * C, "matmul_nt_backward: dinp too small");
    sgemm(false, false, N, C, OC, 1.0f, dout.data(), OC, weight.data(), C, dinp_overwrite ? 0.0f : 1.0f, dinp.data(), C);
  }
  // ... and dW += dout^T @ inp
  sgemm(true, false, OC, C, N, 1.0f, dout.data(), OC, inp.data(), C, 1.0f, dweight.data(), C);
}

}  // namespace remat::kernels
