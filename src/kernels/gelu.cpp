#include "kernels/gelu.h"

#include <algorithm>
#include <cstdint>

#include "core/error.h"
#include "kernels/exp_fast.h"

namespace remat::kernels {

namespace {

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
