#include "kernels/residual_bf16.h"

#include <cstring>

#include "core/error.h"
#include "kernels/vec_bf16.h"

namespace remat::kernels {

using vec_bf16::kChunk;

void residual_bf16_forward(std::span<bf16> out, std::span<const bf16> a, std::span<const bf16> b, int64_t N) {
  REMAT_ASSERT(int64_t(out.size()) >= N && int64_t(a.size()) >= N && int64_t(b.size()) >= N,
               "residual_bf16_forward: span too small");
  bf16* o = out.data();
  const bf16 *pa = a.data(), *pb = b.data();
  vec_bf16::for_chunks(N, [&](int64_t i0, int64_t len) {
    float t[kChunk];
    for (int64_t i = 0; i < len; ++i) t[i] = bf16_to_float(pa[i0 + i]) + bf16_to_float(pb[i0 + i]);
    to_bf16(o + i0, t, len);
  });
}

void residual_bf16_backward(std::span<bf16> da, std::span<bf16> db, std::span<const bf16> dout, int64_t N) {
  REMAT_ASSERT(int64_t(da.size()) >= N && int64_t(db.size()) >= N && int64_t(dout.size()) >= N,
               "residual_bf16_backward: span too small");
  // forward was: out = a + b, so da += dout and db += dout
  add_inplace_bf16(da, dout, N);
  add_inplace_bf16(db, dout, N);
}

void add_inplace_bf16(std::span<bf16> dst, std::span<const bf16> src, int64_t N) {
  REMAT_ASSERT(int64_t(dst.size()) >= N && int64_t(src.size()) >= N, "add_inplace_bf16: span too small");
  residual_bf16_forward(dst, dst, src, N);
}

void assign_bf16(std::span<bf16> dst, std::span<const bf16> src, int64_t N) {
  REMAT_ASSERT(int64_t(dst.size()) >= N && int64_t(src.size()) >= N, "assign_bf16: span too small");
  bf16* o = dst.data();
  const bf16* s = src.data();
  vec_bf16::for_chunks(N, [&](int64_t i0, int64_t len) { std::memcpy(o + i0, s + i0, len * sizeof(bf16)); });
}

void residual_mixed_forward(std::span<float> out, std::span<const float> a, std::span<const bf16> b, int64_t N) {
  REMAT_ASSERT(int64_t(out.size()) >= N && int64_t(a.size()) >= N && int64_t(b.size()) >= N,
               "residual_mixed_forward: span too small");
  float* o = out.data();
  const float* pa = a.data();
  const bf16* pb = b.data();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) o[i] = pa[i] + bf16_to_float(pb[i]);
}

void add_inplace_mixed(std::span<float> dst, std::span<const bf16> src, int64_t N) {
  REMAT_ASSERT(int64_t(dst.size()) >= N && int64_t(src.size()) >= N, "add_inplace_mixed: span too small");
  residual_mixed_forward(dst, dst, src, N);
}

void residual_mixed_backward(std::span<float> da, std::span<bf16> db, std::span<const float> dout, int64_t N) {
  REMAT_ASSERT(int64_t(da.size()) >= N && int64_t(db.size()) >= N && int64_t(dout.size()) >= N,
               "residual_mixed_backward: span too small");
  float* ga = da.data();
  bf16* gb = db.data();
  const float* d = dout.data();
  // forward was: out = a + b, so da += dout (fp32) and db += dout (in fp32, rounded once)
  vec_bf16::for_chunks(N, [&](int64_t i0, int64_t len) {
    float t[kChunk];
    for (int64_t i = 0; i < len; ++i) {
      ga[i0 + i] += d[i0 + i];
      t[i] = bf16_to_float(gb[i0 + i]) + d[i0 + i];
    }
    to_bf16(gb + i0, t, len);
  });
}

}  // namespace remat::kernels
