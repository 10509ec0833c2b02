// fp32 <-> bf16 bulk conversions and the run-time choice of path (declared in bf16.h).
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "kernels/bf16.h"

namespace remat::kernels {

namespace {

// -1: not decided yet; otherwise a Bf16Isa. Decided once from CPUID and REMAT_BF16_ISA.
std::atomic<int> g_isa{-1};

Bf16Isa detect() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16") ? Bf16Isa::Avx512Bf16 : Bf16Isa::Portable;
}

Bf16Isa clamp(Bf16Isa want) { return want == Bf16Isa::Avx512Bf16 ? bf16_cpu_isa() : Bf16Isa::Portable; }

constexpr int64_t kChunk = 1 << 14;  // elements per parallel task: 64 KiB of floats

}  // namespace

const char* bf16_isa_name(Bf16Isa isa) { return isa == Bf16Isa::Avx512Bf16 ? "avx512_bf16" : "portable"; }

Bf16Isa bf16_cpu_isa() {
  static const Bf16Isa isa = detect();
  return isa;
}

Bf16Isa bf16_isa() {
  int v = g_isa.load(std::memory_order_relaxed);
  if (v < 0) {
    Bf16Isa want = bf16_cpu_isa();
    if (const char* env = std::getenv("REMAT_BF16_ISA")) {
      if (std::strcmp(env, "portable") == 0) want = Bf16Isa::Portable;
      // Anything else (avx512_bf16, empty) keeps the CPU's best path.
    }
    int expected = -1;
    g_isa.compare_exchange_strong(expected, int(want));
    v = g_isa.load();
  }
  return Bf16Isa(v);
}

Bf16Isa set_bf16_isa(Bf16Isa isa) {
  const Bf16Isa prev = bf16_isa();
  g_isa.store(int(clamp(isa)));
  return prev;
}

namespace bf16_path {

void to_bf16_portable(bf16* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = float_to_bf16(src[i]);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void to_bf16_avx512(bf16* dst, const float* src,
                                                                                      int64_t n) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF), denorm_max = _mm512_set1_epi32(0x007FFFFE),
                one = _mm512_set1_epi32(1);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 lo = _mm512_loadu_ps(src + i), hi = _mm512_loadu_ps(src + i + 16);
    const __m512bh r = _mm512_cvtne2ps_pbh(hi, lo);  // lanes 0..15 from lo, 16..31 from hi
    _mm512_storeu_si512(dst + i, (__m512i)r);
    // vcvtne2ps2bf16 flushes denormal inputs to (signed) zero: redo those lanes. |x| - 1 <= 0x7FFFFE
    // (unsigned) exactly when x is denormal (a zero wraps around to 0xFFFFFFFF).
    const __mmask16 dlo = _mm512_cmple_epu32_mask(
        _mm512_sub_epi32(_mm512_and_si512(_mm512_castps_si512(lo), abs_mask), one), denorm_max);
    const __mmask16 dhi = _mm512_cmple_epu32_mask(
        _mm512_sub_epi32(_mm512_and_si512(_mm512_castps_si512(hi), abs_mask), one), denorm_max);
    if (__builtin_expect((dlo | dhi) != 0, 0))
      for (int j = 0; j < 32; ++j) dst[i + j] = float_to_bf16(src[i + j]);
  }
  for (; i < n; ++i) dst[i] = float_to_bf16(src[i]);
}

}  // namespace bf16_path

void to_bf16(bf16* dst, const float* src, int64_t n) {
  if (bf16_isa() == Bf16Isa::Avx512Bf16)
    bf16_path::to_bf16_avx512(dst, src, n);
  else
    bf16_path::to_bf16_portable(dst, src, n);
}

void to_float(float* dst, const bf16* src, int64_t n) {
  // Exact on every path: a 16-bit shift, which compilers vectorise.
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(src[i]);
}

void to_bf16_parallel(bf16* dst, const float* src, int64_t n) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) to_bf16(dst + c * kChunk, src + c * kChunk, std::min(kChunk, n - c * kChunk));
}

void to_float_parallel(float* dst, const bf16* src, int64_t n) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) to_float(dst + c * kChunk, src + c * kChunk, std::min(kChunk, n - c * kChunk));
}

}  // namespace remat::kernels
