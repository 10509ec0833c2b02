#include "kernels/swiglu.h"

#include <cmath>

#include "core/error.h"
#include "kernels/exp_fast.h"
#include "kernels/vec_bf16.h"

namespace remat::kernels {

namespace {

using vec_bf16::chunk_in;
using vec_bf16::chunk_inout;
using vec_bf16::chunk_out;
using vec_bf16::kChunk;
using vec_bf16::store;

// sigmoid(x) and 1 - sigmoid(x) from e = exp(-|x|) in [0, 1]: exp never overflows, and both come out
// with small relative error in either tail (no 1 - s cancellation, no huge denominators), so
// silu(x) = x s and silu'(x) = s (1 + x (1 - s)) are finite for every finite x: silu(-100) = -0,
// silu(100) = 100. The selects are branch-free, so the loops still vectorise.
struct Sigmoid {
  float s, one_minus_s;
};
inline Sigmoid sigmoid(float x) {
  const float e = exp_fast(-std::fabs(x));
  const float r = 1.0f / (1.0f + e);
  const bool pos = x >= 0.0f;
  return {(pos ? 1.0f : e) * r, (pos ? e : 1.0f) * r};
}

}  // namespace

template <class S>
void swiglu_forward(std::span<S> out, std::span<const S> gate, std::span<const S> up, int64_t n) {
  REMAT_ASSERT(int64_t(out.size()) >= n && int64_t(gate.size()) >= n && int64_t(up.size()) >= n,
               "swiglu_forward: span too small");
  S* o = out.data();
  const S *g = gate.data(), *u = up.data();
  // No __restrict: out may alias gate or up (elementwise, each element read before it is written; on
  // bf16 a chunk is widened whole before it is stored).
  vec_bf16::for_chunks(n, [&](int64_t i0, int64_t len) {
    float gb[kChunk], ub[kChunk], tb[kChunk];
    const float* gv = chunk_in(g + i0, gb, len);
    const float* uv = chunk_in(u + i0, ub, len);
    float* t = chunk_out(o + i0, tb);
    for (int64_t i = 0; i < len; ++i) {
      const float x = gv[i];
      t[i] = x * sigmoid(x).s * uv[i];
    }
    store(o + i0, t, len);
  });
}

template <class S>
void swiglu_backward(std::span<S> dgate, std::span<S> dup, std::span<const S> dout, std::span<const S> gate,
                     std::span<const S> up, int64_t n) {
  REMAT_ASSERT(int64_t(dgate.size()) >= n && int64_t(dup.size()) >= n && int64_t(dout.size()) >= n &&
                   int64_t(gate.size()) >= n && int64_t(up.size()) >= n,
               "swiglu_backward: span too small");
  S *dg = dgate.data(), *du = dup.data();
  const S *d = dout.data(), *g = gate.data(), *u = up.data();
  // forward was: out = silu(g) * u with silu(g) = g s, s = sigmoid(g), so
  //   dup += dout * g s,   dgate += dout * u * silu'(g),  silu'(g) = s + g s (1 - s) = s (1 + g (1 - s))
  // (the same s as the forward, so dup is exactly dout * the forward's silu).
  vec_bf16::for_chunks(n, [&](int64_t i0, int64_t len) {
    float gb[kChunk], ub[kChunk], db[kChunk], tgb[kChunk], tub[kChunk];
    const float* __restrict gv = chunk_in(g + i0, gb, len);
    const float* __restrict uv = chunk_in(u + i0, ub, len);
    const float* __restrict dv = chunk_in(d + i0, db, len);
    float* __restrict tg = chunk_inout(dg + i0, tgb, len);
    float* __restrict tu = chunk_inout(du + i0, tub, len);
    for (int64_t i = 0; i < len; ++i) {
      const float x = gv[i], di = dv[i];
      const Sigmoid sg = sigmoid(x);
      tg[i] += di * uv[i] * (sg.s * (1.0f + x * sg.one_minus_s));
      tu[i] += di * (x * sg.s);
    }
    store(dg + i0, tg, len);
    store(du + i0, tu, len);
  });
}

template void swiglu_forward(std::span<float>, std::span<const float>, std::span<const float>, int64_t);
template void swiglu_forward(std::span<bf16>, std::span<const bf16>, std::span<const bf16>, int64_t);
template void swiglu_backward(std::span<float>, std::span<float>, std::span<const float>, std::span<const float>,
                              std::span<const float>, int64_t);
template void swiglu_backward(std::span<bf16>, std::span<bf16>, std::span<const bf16>, std::span<const bf16>,
                              std::span<const bf16>, int64_t);

}  // namespace remat::kernels
