#include "kernels/gelu_bf16.h"

#include "core/error.h"
#include "kernels/exp_fast.h"
#include "kernels/vec_bf16.h"

namespace remat::kernels {

namespace {

using vec_bf16::kChunk;
constexpr float kS2Pi = 0.7978845608028654f;  // sqrt(2/pi), as gelu.cpp
constexpr float kCube = 0.044715f;

// gelu.cpp's expressions, operation for operation, so each value is the fp32 twin's before rounding.
inline float gelu(float v) {
  const float u = kS2Pi * (v + kCube * v * v * v);
  return v / (1.0f + exp_fast(-2.0f * u));
}
inline float gelu_grad(float v, float d) {
  const float u = kS2Pi * (v + kCube * v * v * v);
  const float s = 1.0f / (1.0f + exp_fast(-2.0f * u));
  const float du = kS2Pi * (1.0f + 3.0f * kCube * v * v);
  return d * (s + 2.0f * v * s * (1.0f - s) * du);
}

}  // namespace

void gelu_bf16_forward(std::span<bf16> out, std::span<const bf16> inp, int64_t N) {
  REMAT_ASSERT(int64_t(out.size()) >= N && int64_t(inp.size()) >= N, "gelu_bf16_forward: span too small");
  const bf16* x = inp.data();
  bf16* o = out.data();
  // Widen a chunk, compute on plain fp32 arrays (the loop vectorizes), round once.
  vec_bf16::for_chunks(N, [&](int64_t i0, int64_t len) {
    float xv[kChunk], t[kChunk];
    to_float(xv, x + i0, len);
    for (int64_t i = 0; i < len; ++i) t[i] = gelu(xv[i]);
    to_bf16(o + i0, t, len);
  });
}

void gelu_bf16_backward(std::span<bf16> dinp, std::span<const bf16> inp, std::span<const bf16> dout, int64_t N,
                        bool overwrite) {
  REMAT_ASSERT(int64_t(dinp.size()) >= N && int64_t(inp.size()) >= N && int64_t(dout.size()) >= N,
               "gelu_bf16_backward: span too small");
  const bf16 *x = inp.data(), *d = dout.data();
  bf16* dx = dinp.data();
  vec_bf16::for_chunks(N, [&](int64_t i0, int64_t len) {
    float xv[kChunk], dv[kChunk], t[kChunk];
    to_float(xv, x + i0, len);
    to_float(dv, d + i0, len);
    for (int64_t i = 0; i < len; ++i) t[i] = gelu_grad(xv[i], dv[i]);
    if (!overwrite) {
      float acc[kChunk];
      to_float(acc, dx + i0, len);
      for (int64_t i = 0; i < len; ++i) t[i] = acc[i] + t[i];
    }
    to_bf16(dx + i0, t, len);
  });
}

}  // namespace remat::kernels
