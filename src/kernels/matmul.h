// Dense layers. GPT-2 "Conv1D" layout: weight is (C, OC) = (in, out), as Hugging Face stores it;
// the tied LM head uses wte (V, C) = (out, in) through the *_nt variants.
// One kernel over the storage type S of the activations and the weight, float or bf16 (instantiated
// for both in matmul.cpp): fp32 products go through sgemm (gemm.h); bf16 ones through gemm_bf16
// (gemm_bf16.h: the bf16 copy of the weights, fp32 accumulation, the bias added in fp32 before the
// one rounding). The bias and the parameter gradients are fp32 on either, and ADDED (+=) in fp32, so
// they accumulate across micro-batches without bf16 rounding. Activation gradients are S: dinp += ...
// (read, added in fp32 and rounded once on bf16), or, with dinp_overwrite, written without being read.
// Under a ShapeOnlyScope (a dry run, core/tensor.h) they touch no data; bf16 ones count oneDNN's
// scratchpad, call by call, as a real run allocates it (gemm_bf16.h).
#pragma once
#include <cstdint>
#include <span>

#include "kernels/bf16.h"

namespace remat::kernels {

// out(N,OC) = inp(N,C) @ weight(C,OC) + bias(OC). bias may be empty (no bias).
template <class S>
void matmul_forward(std::span<S> out, std::span<const S> inp, std::span<const S> weight, std::span<const float> bias,
                    int64_t N, int64_t C, int64_t OC);

// Accumulates: dinp(N,C) += dout @ weight^T; dweight(C,OC) += inp^T @ dout; dbias(OC) += colsum(dout).
// dinp and dbias may be empty (skipped). dbias is summed row by row in order: bit-identical for
// any thread count. With dinp_overwrite, dinp is written, not accumulated (its old contents are
// ignored): the caller's fresh gradient buffer needs no zero fill, and the GEMM runs with beta = 0,
// which oneDNN does markedly faster than beta = 1 (it never reads C).
template <class S>
void matmul_backward(std::span<S> dinp, std::span<float> dweight, std::span<float> dbias, std::span<const S> dout,
                     std::span<const S> inp, std::span<const S> weight, int64_t N, int64_t C, int64_t OC,
                     bool dinp_overwrite = false);

// out(N,OC) = inp(N,C) @ weight(OC,C)^T, no bias (LM head with tied wte).
template <class S>
void matmul_nt_forward(std::span<S> out, std::span<const S> inp, std::span<const S> weight, int64_t N, int64_t C,
                       int64_t OC);

// Accumulates: dinp(N,C) += dout(N,OC) @ weight(OC,C); dweight(OC,C) += dout^T @ inp.
// dinp may be empty (skipped); dinp_overwrite as in matmul_backward.
template <class S>
void matmul_nt_backward(std::span<S> dinp, std::span<float> dweight, std::span<const S> dout, std::span<const S> inp,
                        std::span<const S> weight, int64_t N, int64_t C, int64_t OC, bool dinp_overwrite = false);

}  // namespace remat::kernels
