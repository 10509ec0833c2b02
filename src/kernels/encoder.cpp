#include "kernels/encoder.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "kernels/vec_bf16.h"

namespace remat::kernels {

namespace {

using vec_bf16::chunk_out;
using vec_bf16::kChunk;
using vec_bf16::store;
using vec_bf16::widen;
constexpr int64_t kChanBlock = 64;  // channels per backward task (256 bytes of each fp32 row)

}  // namespace

// out(B,T,C)[b,t,:] = wte[tokens[b*T+t], :] + wpe[t, :] (wte alone when wpe is empty).
template <class S>
void encoder_forward(std::span<S> out, const int32_t* tokens, std::span<const float> wte, std::span<const float> wpe,
                     int64_t B, int64_t T, int64_t C) {
  const char* who = "encoder_forward";
  const int64_t V = int64_t(wte.size()) / C;
  const bool has_pos = !wpe.empty();  // empty wpe: no position embedding (LLaMA)
  REMAT_ASSERT_IN(who, int64_t(out.size()) >= B * T * C && (!has_pos || int64_t(wpe.size()) >= T * C),
                  "span too small (or T > maxT)");
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const int64_t tok = tokens[bt], t = bt % T;
    REMAT_ASSERT_IN(who, tok >= 0 && tok < V, "token id out of range");
    const float* we = wte.data() + tok * C;
    const float* pe = has_pos ? wpe.data() + t * C : nullptr;
    S* o = out.data() + bt * C;
    for (int64_t c0 = 0; c0 < C; c0 += kChunk) {
      const int64_t len = std::min(kChunk, C - c0);
      if (!has_pos) {
        store(o + c0, we + c0, len);  // a copy (fp32) or one rounding (bf16)
        continue;
      }
      float buf[kChunk];
      float* __restrict s = chunk_out(o + c0, buf);
      for (int64_t c = 0; c < len; ++c) s[c] = we[c0 + c] + pe[c0 + c];
      store(o + c0, s, len);
    }
  }
}

// dwte[tokens[b,t], :] += dout[b,t,:]; dwpe[t, :] += dout[b,t,:] (skipped when dwpe is empty).
template <class S>
void encoder_backward(std::span<float> dwte, std::span<float> dwpe, std::span<const S> dout, const int32_t* tokens,
                      int64_t B, int64_t T, int64_t C) {
  const char* who = "encoder_backward";
  const int64_t V = int64_t(dwte.size()) / C;
  const bool has_pos = !dwpe.empty();  // empty dwpe: no position embedding, nothing to accumulate
  REMAT_ASSERT_IN(who, int64_t(dout.size()) >= B * T * C && (!has_pos || int64_t(dwpe.size()) >= T * C),
                  "span too small");
  const int64_t nblocks = (C + kChanBlock - 1) / kChanBlock;
  // forward was: out[b,t,:] = wte[tok] + wpe[t], so dwte[tok] += dout[b,t] and dwpe[t] += dout[b,t]
  // (the latter only when there is a wpe).
  // Each thread owns a channel slice of every row, so no two threads touch the same float, and each
  // gradient element is summed over (b,t) in order (no atomics even when a token repeats).
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t c0 = blk * kChanBlock, len = std::min(kChanBlock, C - c0);
    for (int64_t bt = 0; bt < B * T; ++bt) {
      const int64_t tok = tokens[bt], t = bt % T;
      REMAT_ASSERT_IN(who, tok >= 0 && tok < V, "token id out of range");
      const S* d = dout.data() + bt * C + c0;
      float* gw = dwte.data() + tok * C + c0;
      if (has_pos) {
        float* gp = dwpe.data() + t * C + c0;
        for (int64_t j = 0; j < len; ++j) {
          const float dj = widen(d[j]);
          gw[j] += dj;
          gp[j] += dj;
        }
      } else {
        for (int64_t j = 0; j < len; ++j) gw[j] += widen(d[j]);
      }
    }
  }
}

template void encoder_forward(std::span<float>, const int32_t*, std::span<const float>, std::span<const float>, int64_t,
                              int64_t, int64_t);
template void encoder_forward(std::span<bf16>, const int32_t*, std::span<const float>, std::span<const float>, int64_t,
                              int64_t, int64_t);
template void encoder_backward(std::span<float>, std::span<float>, std::span<const float>, const int32_t*, int64_t,
                               int64_t, int64_t);
template void encoder_backward(std::span<float>, std::span<float>, std::span<const bf16>, const int32_t*, int64_t,
                               int64_t, int64_t);

}  // namespace remat::kernels
