// Residual connections. One kernel over the storage types, float or bf16 (instantiated in
// residual.cpp): sums in fp32, a bf16 value widened exactly and each bf16 result rounded once.
// Besides both fp32 and both bf16, the mixed form serves --fp32-residual: an fp32 residual stream S
// plus a bf16 branch B. The second type is named, not deduced: residual_forward(out, a, b, N) or
// residual_forward<S>(...) is S for both, the mixed form residual_forward<float, bf16>(...).
// Backward ADDS into its outputs (+=).
#pragma once
#include <cstdint>
#include <span>
#include <type_traits>

#include "kernels/bf16.h"

namespace remat::kernels {

// out[i] = a[i] + b[i] for i < N; out may alias a or b (elementwise). S, B: (float, float),
// (bf16, bf16) or (float, bf16).
template <class S, class B = S>
void residual_forward(std::span<S> out, std::span<const S> a, std::span<const std::type_identity_t<B>> b, int64_t N);

// Accumulates da[i] += dout[i] and db[i] += dout[i]; the gradient dout is the stream's (S). da and db
// must not alias. The first gradient into fresh buffers needs no add: assign (below).
template <class S, class B = S>
void residual_backward(std::span<S> da, std::span<std::type_identity_t<B>> db, std::span<const S> dout, int64_t N);

// dst[i] += src[i] for i < N. D, S: (float, float), (bf16, bf16), (float, bf16) (a bf16 branch into an
// fp32 stream) or (bf16, float) (an fp32 stream's gradient into a bf16 branch's).
template <class D, class S = D>
void add_inplace(std::span<D> dst, std::span<const std::type_identity_t<S>> src, int64_t N);

// dst[i] = src[i] for i < N (a copy, or rounded once for an fp32 src into a bf16 dst): the first
// gradient into a fresh buffer, instead of a zero fill and an add. D, S as add_inplace but (float, bf16).
template <class D, class S = D>
void assign(std::span<D> dst, std::span<const std::type_identity_t<S>> src, int64_t N);

}  // namespace remat::kernels
