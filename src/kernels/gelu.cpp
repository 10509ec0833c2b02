#include "kernels/gelu.h"

#include <algorithm>
#include <bit>
#include <cstdint>

#include "core/error.h"

namespace remat::kernels {

namespace {

// exp(x), ~1 ulp (Cephes expf polynomial), branch-free so loops over it vectorise: glibc's expf is
// only vectorised under -ffast-math, which we do not use. Saturates at exp(88) and is 0 below -87.3.
// (A twin lives in crossentropy.cpp: each kernel file stays self-contained.)
inline float exp_fast(float x) {
  const float xc = std::min(std::max(x, -87.0f), 88.0f);
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round(x / ln2)
  float r = xc - n * 0.693359375f;  // Cody-Waite: x - n ln2 in two steps
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const float scale = std::bit_cast<float>((int32_t(n) + 127) << 23);  // 2^n
  return x < -87.3f ? 0.0f : p * scale;
}

constexpr float kS2Pi = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kCube = 0.044715f;

}  // namespace

void gelu_forward(std::span<float> out, std::span<const float> inp, int64_t N) {
  REMAT_ASSERT(int64_t(out.size()) >= N && int64_t(inp.size()) >= N, "gelu_forward: span too small");
  const float* __restrict x = inp.data();
  float* __restrict o = out.data();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float v = x[i];
    const float u = kS2Pi * (v + kCube * v * v * v);
    // 0.5 (1 + tanh u) == 1 / (1 + exp(-2u)): no cancellation near u = 0 and no tanh call.
    o[i] = v / (1.0f + exp_fast(-2.0f * u));
  }
}

void gelu_backward(std::span<float> dinp, std::span<const float> inp, std::span<const float> dout, int64_t N,
                   bool overwrite) {
  REMAT_ASSERT(int64_t(dinp.size()) >= N && int64_t(inp.size()) >= N && int64_t(dout.size()) >= N,
               "gelu_backward: span too small");
  const float* __restrict x = inp.data();
  const float* __restrict d = dout.data();
  float* __restrict dx = dinp.data();
  // forward was: out = x * s with s = sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3), so
  //   dinp += dout * (s + 2 x s (1 - s) du/dx), du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
  auto grad = [=](int64_t i) {
    const float v = x[i];
    const float u = kS2Pi * (v + kCube * v * v * v);
    const float s = 1.0f / (1.0f + exp_fast(-2.0f * u));
    const float du = kS2Pi * (1.0f + 3.0f * kCube * v * v);
    return d[i] * (s + 2.0f * v * s * (1.0f - s) * du);
  };
  if (overwrite) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; ++i) dx[i] = grad(i);
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; ++i) dx[i] += grad(i);
  }
}

}  // namespace remat::kernels
