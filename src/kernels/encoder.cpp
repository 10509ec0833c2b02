#include "kernels/encoder.h"

#include <algorithm>

#include "core/error.h"

namespace remat::kernels {

namespace {
constexpr int64_t kChanBlock = 64;  // channels per backward task (256 bytes of each row)
}

void encoder_forward(std::span<float> out, const int32_t* tokens, std::span<const float> wte,
                     std::span<const float> wpe, int64_t B, int64_t T, int64_t C) {
  const int64_t V = int64_t(wte.size()) / C;
  const bool has_pos = !wpe.empty();  // empty wpe: no position embedding (LLaMA)
  REMAT_ASSERT(int64_t(out.size()) >= B * T * C && (!has_pos || int64_t(wpe.size()) >= T * C),
               "encoder_forward: span too small (or T > maxT)");
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const int64_t tok = tokens[bt], t = bt % T;
    REMAT_ASSERT(tok >= 0 && tok < V, "encoder_forward: token id out of range");
    const float* we = wte.data() + tok * C;
    float* o = out.data() + bt * C;
    if (has_pos) {
      const float* pe = wpe.data() + t * C;
      for (int64_t c = 0; c < C; ++c) o[c] = we[c] + pe[c];
    } else {
      for (int64_t c = 0; c < C; ++c) o[c] = we[c];
    }
  }
}

void encoder_backward(std::span<float> dwte, std::span<float> dwpe, std::span<const float> dout,
                      const int32_t* tokens, int64_t B, int64_t T, int64_t C) {
  const int64_t V = int64_t(dwte.size()) / C;
  const bool has_pos = !dwpe.empty();  // empty dwpe: no position embedding, nothing to accumulate
  REMAT_ASSERT(int64_t(dout.size()) >= B * T * C && (!has_pos || int64_t(dwpe.size()) >= T * C),
               "encoder_backward: span too small");
  const int64_t nblocks = (C + kChanBlock - 1) / kChanBlock;
  // forward was: out[b,t,:] = wte[tok] + wpe[t], so dwte[tok] += dout[b,t] and dwpe[t] += dout[b,t]
  // (the latter only when there is a wpe).
  // Each thread owns a channel slice of every row, so no two threads touch the same float.
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t c0 = blk * kChanBlock, len = std::min(kChanBlock, C - c0);
    for (int64_t bt = 0; bt < B * T; ++bt) {
      const int64_t tok = tokens[bt], t = bt % T;
      REMAT_ASSERT(tok >= 0 && tok < V, "encoder_backward: token id out of range");
      const float* d = dout.data() + bt * C + c0;
      float* gw = dwte.data() + tok * C + c0;
      if (has_pos) {
        float* gp = dwpe.data() + t * C + c0;
        for (int64_t j = 0; j < len; ++j) {
          gw[j] += d[j];
          gp[j] += d[j];
        }
      } else {
        for (int64_t j = 0; j < len; ++j) gw[j] += d[j];
      }
    }
  }
}

}  // namespace remat::kernels
