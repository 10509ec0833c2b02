#include "kernels/encoder_bf16.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/vec_bf16.h"

namespace remat::kernels {

namespace {
using vec_bf16::kChunk;
constexpr int64_t kChanBlock = 64;  // channels per backward task, as encoder.cpp
}  // namespace

void encoder_bf16_forward(std::span<bf16> out, const int32_t* tokens, std::span<const float> wte,
                          std::span<const float> wpe, int64_t B, int64_t T, int64_t C) {
  const int64_t V = int64_t(wte.size()) / C;
  const bool has_pos = !wpe.empty();  // empty wpe: no position embedding (LLaMA)
  REMAT_ASSERT(int64_t(out.size()) >= B * T * C && (!has_pos || int64_t(wpe.size()) >= T * C),
               "encoder_bf16_forward: span too small (or T > maxT)");
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const int64_t tok = tokens[bt], t = bt % T;
    REMAT_ASSERT(tok >= 0 && tok < V, "encoder_bf16_forward: token id out of range");
    const float* we = wte.data() + tok * C;
    const float* pe = has_pos ? wpe.data() + t * C : nullptr;
    bf16* o = out.data() + bt * C;
    // The sum in fp32 (encoder.cpp's expression), then one rounding per element.
    for (int64_t c0 = 0; c0 < C; c0 += kChunk) {
      const int64_t len = std::min(kChunk, C - c0);
      if (!has_pos) {
        to_bf16(o + c0, we + c0, len);
        continue;
      }
      float s[kChunk];
      for (int64_t c = 0; c < len; ++c) s[c] = we[c0 + c] + pe[c0 + c];
      to_bf16(o + c0, s, len);
    }
  }
}

void encoder_bf16_backward(std::span<float> dwte, std::span<float> dwpe, std::span<const bf16> dout,
                           const int32_t* tokens, int64_t B, int64_t T, int64_t C) {
  const int64_t V = int64_t(dwte.size()) / C;
  const bool has_pos = !dwpe.empty();  // empty dwpe: no position embedding, nothing to accumulate
  REMAT_ASSERT(int64_t(dout.size()) >= B * T * C && (!has_pos || int64_t(dwpe.size()) >= T * C),
               "encoder_bf16_backward: span too small");
  const int64_t nblocks = (C + kChanBlock - 1) / kChanBlock;
  // forward was: out[b,t,:] = wte[tok] + wpe[t], so dwte[tok] += dout[b,t] and dwpe[t] += dout[b,t].
  // Each thread owns a channel slice of every row (no two threads touch the same float), and each
  // gradient element is summed over (b,t) in order: encoder_backward's order, with the exact widening
  // of dout, so the same bits as the fp32 kernel on f32(dout).
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t c0 = blk * kChanBlock, len = std::min(kChanBlock, C - c0);
    for (int64_t bt = 0; bt < B * T; ++bt) {
      const int64_t tok = tokens[bt], t = bt % T;
      REMAT_ASSERT(tok >= 0 && tok < V, "encoder_bf16_backward: token id out of range");
      const bf16* d = dout.data() + bt * C + c0;
      float* gw = dwte.data() + tok * C + c0;
      if (has_pos) {
        float* gp = dwpe.data() + t * C + c0;
        for (int64_t j = 0; j < len; ++j) {
          const float dj = bf16_to_float(d[j]);
          gw[j] += dj;
          gp[j] += dj;
        }
      } else {
        for (int64_t j = 0; j < len; ++j) gw[j] += bf16_to_float(d[j]);
      }
    }
  }
}

}  // namespace remat::kernels
