#include "kernels/gelu.h"

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
constexpr float kS2Pi = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kCube = 0.044715f;

// 0.5 v (1 + tanh u) == v / (1 + exp(-2u)): no cancellation near u = 0 and no tanh call.
inline float gelu(float v) {
  const float u = kS2Pi * (v + kCube * v * v * v);
  return v / (1.0f + exp_fast(-2.0f * u));
}
// forward was: out = x * s with s = sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3), so
//   dinp += dout * (s + 2 x s (1 - s) du/dx), du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
inline float gelu_grad(float v, float d) {
  const float u = kS2Pi * (v + kCube * v * v * v);
  const float s = 1.0f / (1.0f + exp_fast(-2.0f * u));
  const float du = kS2Pi * (1.0f + 3.0f * kCube * v * v);
  return d * (s + 2.0f * v * s * (1.0f - s) * du);
}

}  // namespace

template <class S>
void gelu_forward(std::span<S> out, std::span<const S> inp, int64_t N) {
  REMAT_ASSERT(int64_t(out.size()) >= N && int64_t(inp.size()) >= N, "gelu_forward: span too small");
  const S* x = inp.data();
  S* o = out.data();
  vec_bf16::for_chunks(N, [&](int64_t i0, int64_t len) {
    float xb[kChunk], ob[kChunk];
    const float* __restrict xv = chunk_in(x + i0, xb, len);
    float* __restrict t = chunk_out(o + i0, ob);
    for (int64_t i = 0; i < len; ++i) t[i] = gelu(xv[i]);
    store(o + i0, t, len);
  });
}

template <class S>
void gelu_backward(std::span<S> dinp, std::span<const S> inp, std::span<const S> dout, int64_t N, bool overwrite) {
  REMAT_ASSERT(int64_t(dinp.size()) >= N && int64_t(inp.size()) >= N && int64_t(dout.size()) >= N,
               "gelu_backward: span too small");
  const S *x = inp.data(), *d = dout.data();
  S* dx = dinp.data();
  vec_bf16::for_chunks(N, [&](int64_t i0, int64_t len) {
    float xb[kChunk], db[kChunk], tb[kChunk];
    const float* __restrict xv = chunk_in(x + i0, xb, len);
    const float* __restrict dv = chunk_in(d + i0, db, len);
    if (overwrite) {
      float* __restrict t = chunk_out(dx + i0, tb);
      for (int64_t i = 0; i < len; ++i) t[i] = gelu_grad(xv[i], dv[i]);
      store(dx + i0, t, len);
    } else {
      float* __restrict t = chunk_inout(dx + i0, tb, len);
      for (int64_t i = 0; i < len; ++i) t[i] += gelu_grad(xv[i], dv[i]);
      store(dx + i0, t, len);
    }
  });
}

template void gelu_forward(std::span<float>, std::span<const float>, int64_t);
template void gelu_forward(std::span<bf16>, std::span<const bf16>, int64_t);
template void gelu_backward(std::span<float>, std::span<const float>, std::span<const float>, int64_t, bool);
template void gelu_backward(std::span<bf16>, std::span<const bf16>, std::span<const bf16>, int64_t, bool);

}  // namespace remat::kernels
