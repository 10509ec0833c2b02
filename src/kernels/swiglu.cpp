#include "kernels/swiglu.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/error.h"
#include "kernels/exp_fast.h"

namespace remat::kernels {

namespace {

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

void swiglu_forward(std::span<float> out, std::span<const float> gate, std::span<const float> up, int64_t n) {
  REMAT_ASSERT(int64_t(out.size()) >= n && int64_t(gate.size()) >= n && int64_t(up.size()) >= n,
               "swiglu_forward: span too small");
  // No __restrict: out may alias gate or up (elementwise, each element read before it is written).
  float* o = out.data();
  const float *g = gate.data(), *u = up.data();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float x = g[i];
    o[i] = x * sigmoid(x).s * u[i];
  }
}

void swiglu_backward(std::span<float> dgate, std::span<float> dup, std::span<const float> dout,
                     std::span<const float> gate, std::span<const float> up, int64_t n) {
  REMAT_ASSERT(int64_t(dgate.size()) >= n && int64_t(dup.size()) >= n && int64_t(dout.size()) >= n &&
                   int64_t(gate.size()) >= n && int64_t(up.size()) >= n,
               "swiglu_backward: span too small");
  float* __restrict dg = dgate.data();
  float* __restrict du = dup.data();
  const float* __restrict d = dout.data();
  const float* __restrict g = gate.data();
  const float* __restrict u = up.data();
  // forward was: out = silu(g) * u with silu(g) = g s, s = sigmoid(g), so
  //   dup += dout * g s,   dgate += dout * u * silu'(g),  silu'(g) = s + g s (1 - s) = s (1 + g (1 - s))
  // (the same s as the forward, so dup is exactly dout * the forward's silu).
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float x = g[i], di = d[i];
    const Sigmoid sg = sigmoid(x);
    dg[i] += di * u[i] * (sg.s * (1.0f + x * sg.one_minus_s));
    du[i] += di * (x * sg.s);
  }
}

}  // namespace remat::kernels
