#include "kernels/residual.h"

#include "core/error.h"

namespace remat::kernels {

void residual_forward(std::span<float> out, std::span<const float> a, std::span<const float> b, int64_t N) {
  REMAT_ASSERT(int64_t(out.size()) >= N && int64_t(a.size()) >= N && int64_t(b.size()) >= N,
               "residual_forward: span too small");
  // No __restrict: out may legitimately alias a (x = x + f(x)); elementwise, so that is safe.
  float* o = out.data();
  const float *pa = a.data(), *pb = b.data();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) o[i] = pa[i] + pb[i];
}

void residual_backward(std::span<float> da, std::span<float> db, std::span<const float> dout, int64_t N) {
  REMAT_ASSERT(int64_t(da.size()) >= N && int64_t(db.size()) >= N && int64_t(dout.size()) >= N,
               "residual_backward: span too small");
  float *ga = da.data(), *gb = db.data();
  const float* d = dout.data();
  // forward was: out = a + b, so da += dout and db += dout
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    ga[i] += d[i];
    gb[i] += d[i];
  }
}

void add_inplace(std::span<float> dst, std::span<const float> src, int64_t N) {
  REMAT_ASSERT(int64_t(dst.size()) >= N && int64_t(src.size()) >= N, "add_inplace: span too small");
  float* o = dst.data();
  const float* s = src.data();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) o[i] += s[i];
}

void assign(std::span<float> dst, std::span<const float> src, int64_t N) {
  REMAT_ASSERT(int64_t(dst.size()) >= N && int64_t(src.size()) >= N, "assign: span too small");
  float* o = dst.data();
  const float* s = src.data();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) o[i] = s[i];
}

}  // namespace remat::kernels
