#include "kernels/rope.h"

#include <cmath>

#include "kernels/rope_impl.h"

namespace remat::kernels {

void rope_table(std::span<float> cos, std::span<float> sin, int64_t T, int64_t HS, float theta) {
  const char* who = "rope_table";
  REMAT_ROPE_CHECK_HS(HS);
  const int64_t H = HS / 2;
  REMAT_ASSERT_IN(who, int64_t(cos.size()) >= T * H && int64_t(sin.size()) >= T * H, "span too small");
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < H; ++i) {
      // In double, then rounded once: accurate to ~1 float ulp even at large t (Hugging Face forms
      // t * inv_freq in fp32, which loses low bits of the angle as t grows). Built once per run.
      const double angle = double(t) * std::pow(double(theta), -2.0 * double(i) / double(HS));
      cos[t * H + i] = float(std::cos(angle));
      sin[t * H + i] = float(std::sin(angle));
    }
}

// The kernel is rope_impl.h's, over fp32 storage.
void rope_qkv_forward(std::span<float> qkv, std::span<const float> q, std::span<const float> k,
                      std::span<const float> v, std::span<const float> cos, std::span<const float> sin,
                      int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HS) {
  rope_impl::forward("rope_qkv_forward", qkv, q, k, v, cos, sin, B, T, NH, KVH, HS);
}

void rope_qkv_backward(std::span<float> dq, std::span<float> dk, std::span<float> dv, std::span<const float> dqkv,
                       std::span<const float> cos, std::span<const float> sin,
                       int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HS) {
  rope_impl::backward("rope_qkv_backward", dq, dk, dv, dqkv, cos, sin, B, T, NH, KVH, HS);
}

}  // namespace remat::kernels
