#include "kernels/residual.h"

#include <cstring>
#include <type_traits>

#include "core/error.h"
#include "kernels/vec_bf16.h"

namespace remat::kernels {

namespace {

using vec_bf16::chunk_in;
using vec_bf16::chunk_out;
using vec_bf16::kChunk;
using vec_bf16::store;

// o[i] = a[i] + b[i], i < N, in fp32; o may alias a or b (a chunk is read whole before it is stored).
template <class D, class S>
void add(D* o, const D* a, const S* b, int64_t N) {
  vec_bf16::for_chunks(N, [&](int64_t i0, int64_t len) {
    float ab[kChunk], bb[kChunk], tb[kChunk];
    const float* av = chunk_in(a + i0, ab, len);
    const float* bv = chunk_in(b + i0, bb, len);
    float* t = chunk_out(o + i0, tb);
    for (int64_t i = 0; i < len; ++i) t[i] = av[i] + bv[i];
    store(o + i0, t, len);
  });
}

}  // namespace

template <class S, class B>
void residual_forward(std::span<S> out, std::span<const S> a, std::span<const std::type_identity_t<B>> b, int64_t N) {
  REMAT_ASSERT(int64_t(out.size()) >= N && int64_t(a.size()) >= N && int64_t(b.size()) >= N,
               "residual_forward: span too small");
  add(out.data(), a.data(), b.data(), N);
}

template <class S, class B>
void residual_backward(std::span<S> da, std::span<std::type_identity_t<B>> db, std::span<const S> dout, int64_t N) {
  REMAT_ASSERT(int64_t(da.size()) >= N && int64_t(db.size()) >= N && int64_t(dout.size()) >= N,
               "residual_backward: span too small");
  // forward was: out = a + b, so da += dout and db += dout
  add(da.data(), da.data(), dout.data(), N);
  add(db.data(), db.data(), dout.data(), N);
}

template <class D, class S>
void add_inplace(std::span<D> dst, std::span<const std::type_identity_t<S>> src, int64_t N) {
  REMAT_ASSERT(int64_t(dst.size()) >= N && int64_t(src.size()) >= N, "add_inplace: span too small");
  add(dst.data(), dst.data(), src.data(), N);
}

template <class D, class S>
void assign(std::span<D> dst, std::span<const std::type_identity_t<S>> src, int64_t N) {
  REMAT_ASSERT(int64_t(dst.size()) >= N && int64_t(src.size()) >= N, "assign: span too small");
  D* o = dst.data();
  const S* s = src.data();
  vec_bf16::for_chunks(N, [&](int64_t i0, int64_t len) {
    if constexpr (std::is_same_v<D, S>) {
      std::memcpy(o + i0, s + i0, size_t(len) * sizeof(D));  // bit for bit (NaNs included)
    } else {
      float buf[kChunk];
      store(o + i0, chunk_in(s + i0, buf, len), len);
    }
  });
}

template void residual_forward<float>(std::span<float>, std::span<const float>, std::span<const float>, int64_t);
template void residual_forward<bf16>(std::span<bf16>, std::span<const bf16>, std::span<const bf16>, int64_t);
template void residual_forward<float, bf16>(std::span<float>, std::span<const float>, std::span<const bf16>, int64_t);
template void residual_backward<float>(std::span<float>, std::span<float>, std::span<const float>, int64_t);
template void residual_backward<bf16>(std::span<bf16>, std::span<bf16>, std::span<const bf16>, int64_t);
template void residual_backward<float, bf16>(std::span<float>, std::span<bf16>, std::span<const float>, int64_t);
template void add_inplace<float>(std::span<float>, std::span<const float>, int64_t);
template void add_inplace<bf16>(std::span<bf16>, std::span<const bf16>, int64_t);
template void add_inplace<float, bf16>(std::span<float>, std::span<const bf16>, int64_t);
template void add_inplace<bf16, float>(std::span<bf16>, std::span<const float>, int64_t);
template void assign<float>(std::span<float>, std::span<const float>, int64_t);
template void assign<bf16>(std::span<bf16>, std::span<const bf16>, int64_t);
template void assign<bf16, float>(std::span<bf16>, std::span<const float>, int64_t);

}  // namespace remat::kernels
