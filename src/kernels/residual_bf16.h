// Residual connections on bf16 tensors (as residual.h): sums in fp32, rounded once. Backward ADDS
// into its outputs (+=, read as bf16, added in fp32, rounded once). The *_mixed forms serve
// --fp32-residual: an fp32 residual stream plus a bf16 branch output.
#pragma once
#include <cstdint>
#include <span>

#include "kernels/bf16.h"

namespace remat::kernels {

// out[i] = a[i] + b[i]; out may alias a or b.
void residual_bf16_forward(std::span<bf16> out, std::span<const bf16> a, std::span<const bf16> b, int64_t N);

// da[i] += dout[i], db[i] += dout[i]. da and db must not alias.
void residual_bf16_backward(std::span<bf16> da, std::span<bf16> db, std::span<const bf16> dout, int64_t N);

// dst[i] += src[i] (bf16), and dst[i] = src[i] (a copy).
void add_inplace_bf16(std::span<bf16> dst, std::span<const bf16> src, int64_t N);
void assign_bf16(std::span<bf16> dst, std::span<const bf16> src, int64_t N);

// fp32 stream: out[i] = a[i] + b[i] with b bf16 (out may alias a); dst[i] += src[i] with src bf16.
void residual_mixed_forward(std::span<float> out, std::span<const float> a, std::span<const bf16> b, int64_t N);
void add_inplace_mixed(std::span<float> dst, std::span<const bf16> src, int64_t N);

// Backward of residual_mixed_forward, whose dout is fp32 (the stream's gradient): da[i] += dout[i] in
// fp32 (exact as residual_backward's), db[i] += dout[i] (bf16: read, added in fp32, rounded once).
// The first gradient into fresh buffers needs no add: assign(da, dout) (residual.h) and
// to_bf16_parallel(db, dout) (bf16.h).
void residual_mixed_backward(std::span<float> da, std::span<bf16> db, std::span<const float> dout, int64_t N);

}  // namespace remat::kernels
