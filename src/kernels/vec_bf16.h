// Helpers shared by the bf16 kernels: 16-lane loads that widen bf16 to fp32 (exact), and the chunked
// pattern of the pointwise kernels (compute a chunk in fp32 on the stack, narrow it with to_bf16, so
// every store goes through the one rounding of bf16.h and its vectorised path).
//
// The loads, widen() and store() are overloaded on the storage type (float or bf16), so a kernel
// written once as a template over its storage type S does its math in fp32 on either: on fp32
// storage they are plain loads and copies (the fp32 kernel's own bits), on bf16 an exact widening and
// one rounding per stored element.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "core/error.h"
#include "kernels/bf16.h"
#include "kernels/vec16.h"

namespace remat::kernels::vec_bf16 {

using vec16::kLanes;
using vec16::v16f;
typedef uint16_t v16h __attribute__((vector_size(32)));
typedef uint32_t v16u __attribute__((vector_size(64)));

inline v16f load16(const bf16* p) {
  v16h h;
  std::memcpy(&h, p, sizeof h);
  const v16u u = __builtin_convertvector(h, v16u) << 16;
  v16f f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline v16f load16(const float* p) { return vec16::load16(p); }

// A stored value in fp32 (exact).
inline float widen(float x) { return x; }
inline float widen(bf16 x) { return bf16_to_float(x); }

// p[0..n) widened, `fill` in the remaining lanes (n < 16).
template <class S>
inline v16f load_tail(const S* p, int64_t n, float fill = 0.0f) {
  v16f v;
  for (int64_t j = 0; j < kLanes; ++j) v[j] = j < n ? widen(p[j]) : fill;
  return v;
}

// A chunk of n fp32 results t into storage d: narrowed once (bf16) or copied (fp32; nothing to do
// when t already is d, see chunk_out).
inline void store(bf16* d, const float* t, int64_t n) { to_bf16(d, t, n); }
inline void store(float* d, const float* t, int64_t n) {
  if (d != t) std::memcpy(d, t, size_t(n) * sizeof(float));
}
// f32 when the storage type S is fp32, b16 when it is bf16: picks one of a pair of twins (kernels,
// functions, values) at compile time, for code written once over S (benchmarks and tests too).
template <class S, class F32, class B16>
constexpr auto by_storage(F32 f32, B16 b16) {
  if constexpr (std::is_same_v<S, float>)
    return f32;
  else
    return b16;
}
// Where a kernel computes the fp32 results of a chunk of d before store(d, ., n): d itself when the
// storage is fp32 (written in place, no copy), else the fp32 stack buffer buf.
template <class S>
inline float* chunk_out(S* d, float* buf) {
  if constexpr (std::is_same_v<S, float>)
    return d;
  else
    return buf;
}

// Where a kernel reads a chunk of n stored values in fp32: p itself when the storage is fp32 (no
// copy), else buf, filled by widening p[0, n) first, so that the math loop runs on plain fp32 arrays
// and vectorises.
template <class S>
inline const float* chunk_in(const S* p, float* buf, int64_t n) {
  if constexpr (std::is_same_v<S, float>) {
    return p;
  } else {
    to_float(buf, p, n);
    return buf;
  }
}
// chunk_out for a kernel that adds into d: the chunk holds d's values in fp32 (d itself, or buf
// widened from it) and is stored back with store(d, ., n).
template <class S>
inline float* chunk_inout(S* d, float* buf, int64_t n) {
  return const_cast<float*>(chunk_in<S>(d, buf, n));  // d itself (not const) or buf
}

// REMAT_ASSERT for a kernel written once over its storage type: the message starts with `who`, the
// public function that was called (rope_qkv_forward, attention_bf16, ...).
#define REMAT_ASSERT_IN(who, cond, msg)                                                                   \
  do {                                                                                                    \
    if (!(cond)) ::remat::assert_fail(#cond, (std::string(who) + ": " + (msg)).c_str(), __FILE__, __LINE__); \
  } while (0)

// Elements per pointwise chunk: two or three fp32 chunks of 4 KiB each live on the stack.
constexpr int64_t kChunk = 1024;

// For each chunk [i0, i0 + len) of [0, n), in parallel over chunks: fn(i0, len).
template <class F>
inline void for_chunks(int64_t n, F&& fn) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) fn(c * kChunk, std::min(kChunk, n - c * kChunk));
}

// For each chunk [c0, c0 + len) of d[0, n), in order: fn(t, c0, len) computes the chunk's fp32 results
// into t (chunk_out's: d + c0 itself on fp32 storage, a stack buffer on bf16), stored then with store().
template <class S, class F>
inline void for_row_chunks(S* d, int64_t n, F&& fn) {
  for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
    const int64_t len = std::min(kChunk, n - c0);
    float buf[kChunk];
    float* t = chunk_out(d + c0, buf);
    fn(t, c0, len);
    store(d + c0, t, len);
  }
}

}  // namespace remat::kernels::vec_bf16
