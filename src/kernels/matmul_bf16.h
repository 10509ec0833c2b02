// Dense layers in bf16, the twins of matmul.h (same layouts and semantics): bf16 activations, the
// bf16 copy of the weights, fp32 bias; products through gemm_bf16 (oneDNN, fp32 accumulation).
// Parameter gradients are fp32 and ADDED (+=) in fp32, so they accumulate across micro-batches
// without bf16 rounding. Activation gradients are bf16: dinp += ... reads the bf16 dinp, adds in
// fp32 and rounds once (or, with dinp_overwrite, is written without being read).
// Under a ShapeOnlyScope (a dry run) they touch no data and only count oneDNN's scratchpad, call by
// call, as a real run allocates it (gemm_bf16.h): the ops call them in dry runs too.
#pragma once
#include <cstdint>
#include <span>

#include "kernels/bf16.h"

namespace remat::kernels {

// out(N,OC) = inp(N,C) @ weight(C,OC) + bias(OC), the bias added in fp32 before the one rounding.
// bias may be empty (no bias).
void matmul_bf16_forward(std::span<bf16> out, std::span<const bf16> inp, std::span<const bf16> weight,
                         std::span<const float> bias, int64_t N, int64_t C, int64_t OC);

// dinp(N,C) += dout @ weight^T (bf16); dweight(C,OC) += inp^T @ dout and dbias(OC) += colsum(dout)
// (fp32). dinp and dbias may be empty (skipped). dbias is summed row by row in order: bit-identical
// for any thread count.
void matmul_bf16_backward(std::span<bf16> dinp, std::span<float> dweight, std::span<float> dbias,
                          std::span<const bf16> dout, std::span<const bf16> inp, std::span<const bf16> weight,
                          int64_t N, int64_t C, int64_t OC, bool dinp_overwrite = false);

// out(N,OC) = inp(N,C) @ weight(OC,C)^T, no bias (LM head with tied wte); bf16 logits.
void matmul_nt_bf16_forward(std::span<bf16> out, std::span<const bf16> inp, std::span<const bf16> weight,
                            int64_t N, int64_t C, int64_t OC);

// dinp(N,C) += dout(N,OC) @ weight(OC,C) (bf16); dweight(OC,C) += dout^T @ inp (fp32).
void matmul_nt_bf16_backward(std::span<bf16> dinp, std::span<float> dweight, std::span<const bf16> dout,
                             std::span<const bf16> inp, std::span<const bf16> weight, int64_t N, int64_t C,
                             int64_t OC, bool dinp_overwrite = false);

}  // namespace remat::kernels
