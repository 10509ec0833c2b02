// The one dtype dispatch of the ops: an op body is written once, as a template over the storage type
// of its tensors, and called for the dtypes at hand; the kernels it calls are templates over the same
// types (kernels/*.h). Internal to src/autograd.
#pragma once
#include <span>
#include <type_traits>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"

namespace remat::autograd {

// f.template operator()<S>() with S = float (F32) or bf16 (BF16): a lambda [&]<class S>() { ... }.
template <class F>
decltype(auto) dispatch(DType d, F&& f) {
  if (d == DType::BF16) return f.template operator()<bf16>();
  return f.template operator()<float>();
}

// The same over a pair (W, N) of a wide and a narrow dtype: both fp32, both bf16, or an fp32 W with a
// bf16 N (--fp32-residual: an fp32 residual stream W and the bf16 block N it feeds or takes from).
// A bf16 W with an fp32 N is an error.
template <class F>
decltype(auto) dispatch_pair(DType wide, DType narrow, F&& f) {
  REMAT_ASSERT(wide == DType::F32 || narrow == DType::BF16, "dispatch_pair: a bf16 tensor paired with an fp32 one");
  if (narrow == DType::F32) return f.template operator()<float, float>();
  if (wide == DType::BF16) return f.template operator()<bf16, bf16>();
  return f.template operator()<float, bf16>();
}

// A tensor's elements as S, which must be its dtype's type (the storage throws otherwise).
template <class S>
std::span<S> span_of(Tensor& t) {
  if constexpr (std::is_same_v<S, float>)
    return t.span();
  else
    return t.bspan();
}
template <class S>
std::span<const S> cspan_of(const Tensor& t) {
  if constexpr (std::is_same_v<S, float>)
    return t.cspan();
  else
    return t.cbspan();
}

}  // namespace remat::autograd
