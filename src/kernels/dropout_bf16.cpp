#include "kernels/dropout_bf16.h"

#include <omp.h>

#include <algorithm>

#include "core/error.h"
#include "kernels/dropout.h"

namespace remat::kernels {

namespace {

// Elements per slab: each slab is widened into fp32 buffers on the stack (32 KiB each), run through
// the fp32 kernel and narrowed once. Large enough that the fp32 kernel's per-call cost (a nested,
// one-thread OpenMP region and the Philox groups cut by the slab's edges) stays a few percent.
constexpr int64_t kSlab = 8192;

// The fp32 kernel, called inside this kernel's parallel loop, is the one implementation of the mask:
// element i0 + e of a call at offset o is element e of the call at offset o + i0 (dropout.h), so each
// slab sees exactly the mask of the whole-tensor call. Its own parallel region runs on the calling
// thread: inactive under OpenMP's default max-active-levels of 1, and given one thread (this task's
// nthreads-var, which ends with the region) should nesting be enabled.
template <class F>
void for_slabs(int64_t N, F&& fn) {
  const int64_t slabs = (N + kSlab - 1) / kSlab;
#pragma omp parallel
  {
    omp_set_num_threads(1);
#pragma omp for schedule(static)
    for (int64_t b = 0; b < slabs; ++b) fn(b * kSlab, std::min(kSlab, N - b * kSlab));
  }
}

}  // namespace

void dropout_bf16_forward(std::span<bf16> out, std::span<const bf16> inp, int64_t N, float p, uint64_t seed,
                          uint64_t offset) {
  REMAT_ASSERT(int64_t(out.size()) >= N && int64_t(inp.size()) >= N, "dropout_bf16_forward: span too small");
  REMAT_ASSERT(p >= 0.0f && p <= 1.0f, "dropout_bf16_forward: p must be in [0, 1]");
  if (N <= 0) return;
  bf16* o = out.data();
  const bf16* x = inp.data();
  // out = round(dropout_forward(widen(inp))): x * scale is one fp32 product, rounded once. A slab is
  // read whole before it is written, so out may alias inp.
  for_slabs(N, [&](int64_t i0, int64_t len) {
    float t[kSlab];
    to_float(t, x + i0, len);
    dropout_forward({t, size_t(len)}, {t, size_t(len)}, len, p, seed, offset + uint64_t(i0));
    to_bf16(o + i0, t, len);
  });
}

void dropout_bf16_backward(std::span<bf16> dinp, std::span<const bf16> dout, int64_t N, float p, uint64_t seed,
                           uint64_t offset) {
  REMAT_ASSERT(int64_t(dinp.size()) >= N && int64_t(dout.size()) >= N, "dropout_bf16_backward: span too small");
  REMAT_ASSERT(p >= 0.0f && p <= 1.0f, "dropout_bf16_backward: p must be in [0, 1]");
  if (N <= 0 || p == 1.0f) return;  // p == 1: nothing was kept, no gradient flows
  bf16* dx = dinp.data();
  const bf16* d = dout.data();
  // forward was: out = keep ? inp * scale : 0, so dinp += keep ? dout * scale : 0: dropout_backward's
  // one fma on the widened values, rounded once.
  for_slabs(N, [&](int64_t i0, int64_t len) {
    float t[kSlab], g[kSlab];
    to_float(t, dx + i0, len);
    to_float(g, d + i0, len);
    dropout_backward({t, size_t(len)}, {g, size_t(len)}, len, p, seed, offset + uint64_t(i0));
    to_bf16(dx + i0, t, len);
  });
}

}  // namespace remat::kernels
