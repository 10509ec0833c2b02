// The one portable exp of the pointwise kernels (GELU, SwiGLU, cross-entropy): e^x, ~1 ulp (Cephes
// expf polynomial), branch-free so loops over it vectorise -- glibc's expf is only vectorised under
// -ffast-math, which remat does not use. Saturates at exp(88), is 0 below -87.3 (including -inf),
// propagates NaN.
//
// One body for a float and for a 16-lane GCC vector (float __attribute__((vector_size(64))), as
// crossentropy.cpp and vec16.h spell it): lane for lane, the vector computes exactly what the scalar
// does. The AVX-512 intrinsic twin, exp512 in simd.h, is another algorithm (other clamps, explicit
// FMAs): the attention kernels use that one.
#pragma once
#include <bit>
#include <cstdint>
#include <type_traits>

namespace remat::kernels {

namespace exp_fast_detail {
typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));
}  // namespace exp_fast_detail

template <class F>
inline F exp_fast(F x) {
  using exp_fast_detail::v16f;
  static_assert(std::is_same_v<F, float> || std::is_same_v<F, v16f>, "exp_fast: float or a 16-lane float vector");
  F xc = x < -87.0f ? -87.0f : x;  // = std::max(x, -87.0f), NaN kept
  xc = xc > 88.0f ? 88.0f : xc;    // = std::min(xc, 88.0f)
  const F n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round(x / ln2)
  F r = xc - n * 0.693359375f;  // Cody-Waite: x - n ln2 in two steps
  r = r - n * -2.12194440e-4f;
  F p = r * 1.9875691500e-4f + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  F scale;  // 2^n
  if constexpr (std::is_same_v<F, float>)
    scale = std::bit_cast<float>((int32_t(n) + 127) << 23);
  else
    scale = (F)((__builtin_convertvector(n, exp_fast_detail::v16i) + 127) << 23);
  return x < -87.3f ? 0.0f : p * scale;
}

}  // namespace remat::kernels
