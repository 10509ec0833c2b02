// Dense layers. GPT-2 "Conv1D" layout: weight is (C, OC) = (in, out), as Hugging Face stores it;
// the tied LM head uses wte (V, C) = (out, in) through the *_nt variants.
// All products go through sgemm (oneDNN). Backward functions ADD into their outputs (+=).
#pragma once
#include <cstdint>
#include <span>

namespace remat::kernels {

// out(N,OC) = inp(N,C) @ weight(C,OC) + bias(OC). bias may be empty (no bias).
void matmul_forward(std::span<float> out, std::span<const float> inp, std::span<const float> weight,
                    std::span<const float> bias, int64_t N, int64_t C, int64_t OC);

// Accumulates: dinp(N,C) += dout @ weight^T; dweight(C,OC) += inp^T @ dout; dbias(OC) += colsum(dout).
// dinp and dbias may be empty (skipped). dbias is summed row by row in order: bit-identical for
// any thread count. With dinp_overwrite, dinp is written, not accumulated (its old contents are
// ignored): the caller's fresh gradient buffer needs no zero fill, and the GEMM runs with beta = 0,
// which oneDNN does markedly faster than beta = 1 (it never reads C).
void matmul_backward(std::span<float> dinp, std::span<float> dweight, std::span<float> dbias,
                     std::span<const float> dout, std::span<const float> inp, std::span<const float> weight,
                     int64_t N, int64_t C, int64_t OC, bool dinp_overwrite = false);

// out(N,OC) = inp(N,C) @ weight(OC,C)^T, no bias (LM head with tied wte).
void matmul_nt_forward(std::span<float> out, std::span<const float> inp, std::span<const float> weight,
                       int64_t N, int64_t C, int64_t OC);

// Accumulates: dinp(N,C) += dout(N,OC) @ weight(OC,C); dweight(OC,C) += dout^T @ inp.
// dinp may be empty (skipped); dinp_overwrite as in matmul_backward.
void matmul_nt_backward(std::span<float> dinp, std::span<float> dweight, std::span<const float> dout,
                        std::span<const float> inp, std::span<const float> weight, int64_t N, int64_t C,
                        int64_t OC, bool dinp_overwrite = false);

}  // namespace remat::kernels
