#include "kernels/matmul_bf16.h"

#include <algorithm>

#include "core/error.h"
#include "core/tensor.h"
#include "kernels/gemm_bf16.h"

namespace remat::kernels {

namespace {
constexpr int64_t kBiasBlock = 64;  // columns per dbias task, as matmul.cpp
}

void matmul_bf16_forward(std::span<bf16> out, std::span<const bf16> inp, std::span<const bf16> weight,
                         std::span<const float> bias, int64_t N, int64_t C, int64_t OC) {
  REMAT_ASSERT(int64_t(out.size()) >= N * OC && int64_t(inp.size()) >= N * C && int64_t(weight.size()) >= C * OC,
               "matmul_bf16_forward: span too small");
  REMAT_ASSERT(bias.empty() || int64_t(bias.size()) >= OC, "matmul_bf16_forward: bias too small");
  // The bias is fused into the primitive: added in fp32 to the fp32 accumulator, then rounded once.
  gemm_bf16(false, false, N, OC, C, inp.data(), C, weight.data(), OC, 0.0f, out.data(), OC,
            bias.empty() ? nullptr : bias.data());
}

void matmul_bf16_backward(std::span<bf16> dinp, std::span<float> dweight, std::span<float> dbias,
                          std::span<const bf16> dout, std::span<const bf16> inp, std::span<const bf16> weight,
                          int64_t N, int64_t C, int64_t OC, bool dinp_overwrite) {
  REMAT_ASSERT(int64_t(dout.size()) >= N * OC && int64_t(inp.size()) >= N * C && int64_t(weight.size()) >= C * OC &&
                   int64_t(dweight.size()) >= C * OC,
               "matmul_bf16_backward: span too small");
  // forward was: out = inp @ W + b, so dinp += dout @ W^T
  if (!dinp.empty()) {
    REMAT_ASSERT(int64_t(dinp.size()) >= N * C, "matmul_bf16_backward: dinp too small");
    gemm_bf16(false, true, N, C, OC, dout.data(), OC, weight.data(), OC, dinp_overwrite ? 0.0f : 1.0f, dinp.data(), C);
  }
  // ... and dW += inp^T @ dout, in fp32
  gemm_bf16(true, false, C, OC, N, inp.data(), C, dout.data(), OC, 1.0f, dweight.data(), OC);
  // ... and db += sum over rows of dout, in fp32: column blocks, each summed over rows in order.
  if (!dbias.empty() && !shape_only()) {
    REMAT_ASSERT(int64_t(dbias.size()) >= OC, "matmul_bf16_backward: dbias too small");
    const int64_t nblocks = (OC + kBiasBlock - 1) / kBiasBlock;
#pragma omp parallel for schedule(static)
    for (int64_t blk = 0; blk < nblocks; ++blk) {
      const int64_t o0 = blk * kBiasBlock, len = std::min(kBiasBlock, OC - o0);
      float acc[kBiasBlock] = {};
      for (int64_t n = 0; n < N; ++n) {
        const bf16* row = dout.data() + n * OC + o0;
        for (int64_t j = 0; j < len; ++j) acc[j] += bf16_to_float(row[j]);
      }
      for (int64_t j = 0; j < len; ++j) dbias[o0 + j] += acc[j];
    }
  }
}

void matmul_nt_bf16_forward(std::span<bf16> out, std::span<const bf16> inp, std::span<const bf16> weight,
                            int64_t N, int64_t C, int64_t OC) {
  REMAT_ASSERT(int64_t(out.size()) >= N * OC && int64_t(inp.size()) >= N * C && int64_t(weight.size()) >= OC * C,
               "matmul_nt_bf16_forward: span too small");
  gemm_bf16(false, true, N, OC, C, inp.data(), C, weight.data(), C, 0.0f, out.data(), OC);
}

void matmul_nt_bf16_backward(std::span<bf16> dinp, std::span<float> dweight, std::span<const bf16> dout,
                             std::span<const bf16> inp, std::span<const bf16> weight, int64_t N, int64_t C,
                             int64_t OC, bool dinp_overwrite) {
  REMAT_ASSERT(int64_t(dout.size()) >= N * OC && int64_t(inp.size()) >= N * C && int64_t(weight.size()) >= OC * C &&
                   int64_t(dweight.size()) >= OC * C,
               "matmul_nt_bf16_backward: span too small");
  // forward was: out = inp @ W^T, so dinp += dout @ W
  if (!dinp.empty()) {
    REMAT_ASSERT(int64_t(dinp.size()) >= N * C, "matmul_nt_bf16_backward: dinp too small");
    gemm_bf16(false, false, N, C, OC, dout.data(), OC, weight.data(), C, dinp_overwrite ? 0.0f : 1.0f, dinp.data(), C);
  }
  // ... and dW += dout^T @ inp, in fp32
  gemm_bf16(true, false, OC, C, N, dout.data(), OC, inp.data(), C, 1.0f, dweight.data(), C);
}

}  // namespace remat::kernels
