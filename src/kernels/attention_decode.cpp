#include "kernels/attention_decode.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/bf16.h"

namespace remat::kernels {

namespace {
inline float widen(float x) { return x; }
inline float widen(bf16 x) { return bf16_to_float(x); }
template <class S>
S narrow(float x) {
  if constexpr (std::is_same_v<S, float>) return x;
  else return float_to_bf16(x);
}
}  // namespace

template <class S>
void attention_decode(std::span<S> out, std::span<float> kcache, std::span<float> vcache, std::span<const S> qkv,
                      int64_t n, int64_t pos, int64_t NH, int64_t KVH, int64_t HS, std::span<float> scratch) {
  const int64_t row = (NH + 2 * KVH) * HS, kv = KVH * HS, group = NH / KVH;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < kv; ++c) {
      kcache[size_t((pos + t) * kv + c)] = widen(qkv[size_t(t * row + NH * HS + c)]);
      vcache[size_t((pos + t) * kv + c)] = widen(qkv[size_t(t * row + NH * HS + kv + c)]);
    }
  const float scale = 1.0f / std::sqrt(float(HS));
  const int64_t len = pos + n;
  const int threads = int(std::min<int64_t>(omp_get_max_threads(), int64_t(scratch.size()) / (len + HS)));
#pragma omp parallel for num_threads(threads > 0 ? threads : 1) schedule(static)
  for (int64_t th = 0; th < n * NH; ++th) {
    const int64_t t = th / NH, h = th % NH, p = pos + t, g = h / group;
    float* s = scratch.data() + size_t(omp_get_thread_num()) * size_t(len + HS);
    float* acc = s + len;
    const S* q = qkv.data() + t * row + h * HS;
    float mx = -INFINITY;
    for (int64_t j = 0; j <= p; ++j) {
      const float* k = kcache.data() + j * kv + g * HS;
      float d = 0;
      for (int64_t c = 0; c < HS; ++c) d += widen(q[c]) * k[c];
      s[j] = d * scale;
      mx = std::max(mx, s[j]);
    }
    float sum = 0;
    for (int64_t j = 0; j <= p; ++j) sum += s[j] = std::exp(s[j] - mx);
    const float inv = 1.0f / sum;
    // On bf16 the probabilities are rounded to bf16 before P V, as the bf16 kernels store and use them
    // (attention_bf16.h): the same values, so that generation draws what the whole window's forward
    // would.
    if constexpr (std::is_same_v<S, bf16>)
      for (int64_t j = 0; j <= p; ++j) s[j] = bf16_to_float(float_to_bf16(s[j] * inv));
    const float norm = std::is_same_v<S, bf16> ? 1.0f : inv;
    for (int64_t c = 0; c < HS; ++c) acc[c] = 0;
    for (int64_t j = 0; j <= p; ++j) {
      const float* v = vcache.data() + j * kv + g * HS;
      for (int64_t c = 0; c < HS; ++c) acc[c] += s[j] * v[c];
    }
    S* o = out.data() + t * NH * HS + h * HS;
    for (int64_t c = 0; c < HS; ++c) o[c] = narrow<S>(acc[c] * norm);
  }
}

template void attention_decode<float>(std::span<float>, std::span<float>, std::span<float>, std::span<const float>,
                                      int64_t, int64_t, int64_t, int64_t, int64_t, std::span<float>);
template void attention_decode<bf16>(std::span<bf16>, std::span<float>, std::span<float>, std::span<const bf16>,
                                     int64_t, int64_t, int64_t, int64_t, int64_t, std::span<float>);

}  // namespace remat::kernels
