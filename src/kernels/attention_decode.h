// Causal attention of new positions over a key/value cache, for generation (model/sample.h): the keys
// and values of every earlier position are kept, so each new token costs one row of attention per
// head over the positions so far, not a forward over the whole context.
//
// Layout as attention.h: qkv (n, (NH + 2*KVH)*HS) holds n new tokens at positions pos .. pos+n-1, per
// token the NH query heads, then the KVH key heads, then the KVH value heads; query head h attends
// with key/value head h / (NH/KVH). The cache holds each position's key and value heads in fp32,
// (capacity, KVH*HS) each (bf16 keys and values are widened exactly). Scores are scaled by
// 1/sqrt(HS); the query at position p attends the keys 0..p. No dropout (generation runs without).
// Scores, softmax and sums are fp32; on bf16 the probabilities are rounded to bf16 before P V, and
// the output once, as attention_bf16.h does.
// Each (token, head) row is computed by one thread in a fixed order: the result does not depend on
// the thread count.
#pragma once
#include <cstdint>
#include <span>

namespace remat::kernels {

// Floats of the `scratch` for `threads` threads over a context of `len` positions, heads of HS.
inline int64_t attention_decode_scratch_floats(int64_t len, int64_t HS, int64_t threads) { return (len + HS) * threads; }

// Writes the n new keys and values into rows pos .. pos+n-1 of kcache and vcache, then
// out (n, NH*HS) = softmax(Q K^T / sqrt(HS), causal) V over the cache's rows 0 .. pos+n-1.
template <class S>
void attention_decode(std::span<S> out, std::span<float> kcache, std::span<float> vcache, std::span<const S> qkv,
                      int64_t n, int64_t pos, int64_t NH, int64_t KVH, int64_t HS, std::span<float> scratch);

}  // namespace remat::kernels
