#include "kernels/swiglu_bf16.h"

#include <cmath>

#include "core/error.h"
#include "kernels/exp_fast.h"
#include "kernels/vec_bf16.h"

namespace remat::kernels {

namespace {

using vec_bf16::kChunk;

// swiglu.cpp's sigmoid, operation for operation (from exp(-|x|): finite for every finite x).
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

void swiglu_bf16_forward(std::span<bf16> out, std::span<const bf16> gate, std::span<const bf16> up, int64_t n) {
  REMAT_ASSERT(int64_t(out.size()) >= n && int64_t(gate.size()) >= n && int64_t(up.size()) >= n,
               "swiglu_bf16_forward: span too small");
  bf16* o = out.data();
  const bf16 *g = gate.data(), *u = up.data();
  // A chunk is read whole into t before it is stored: out may alias gate or up.
  vec_bf16::for_chunks(n, [&](int64_t i0, int64_t len) {
    // Widen, compute on plain fp32 arrays (the loop vectorizes), round once.
    float gv[kChunk], uv[kChunk], t[kChunk];
    to_float(gv, g + i0, len);
    to_float(uv, u + i0, len);
    for (int64_t i = 0; i < len; ++i) {
      const float x = gv[i];
      t[i] = x * sigmoid(x).s * uv[i];
    }
    to_bf16(o + i0, t, len);
  });
}

void swiglu_bf16_backward(std::span<bf16> dgate, std::span<bf16> dup, std::span<const bf16> dout,
                          std::span<const bf16> gate, std::span<const bf16> up, int64_t n) {
  REMAT_ASSERT(int64_t(dgate.size()) >= n && int64_t(dup.size()) >= n && int64_t(dout.size()) >= n &&
                   int64_t(gate.size()) >= n && int64_t(up.size()) >= n,
               "swiglu_bf16_backward: span too small");
  bf16 *dg = dgate.data(), *du = dup.data();
  const bf16 *d = dout.data(), *g = gate.data(), *u = up.data();
  // forward was: out = silu(g) * u, so dup += dout * g s and dgate += dout * u * s (1 + g (1 - s))
  vec_bf16::for_chunks(n, [&](int64_t i0, int64_t len) {
    float gv[kChunk], uv[kChunk], dv[kChunk], tg[kChunk], tu[kChunk];
    to_float(gv, g + i0, len);
    to_float(uv, u + i0, len);
    to_float(dv, d + i0, len);
    to_float(tg, dg + i0, len);
    to_float(tu, du + i0, len);
    for (int64_t i = 0; i < len; ++i) {
      const float x = gv[i], di = dv[i];
      const Sigmoid sg = sigmoid(x);
      tg[i] = tg[i] + di * uv[i] * (sg.s * (1.0f + x * sg.one_minus_s));
      tu[i] = tu[i] + di * (x * sg.s);
    }
    to_bf16(dg + i0, tg, len);
    to_bf16(du + i0, tu, len);
  });
}

}  // namespace remat::kernels
