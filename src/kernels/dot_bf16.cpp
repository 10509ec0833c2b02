#include "kernels/dot_bf16.h"

#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cpuid.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>

#include "kernels/bf16.h"

namespace remat::kernels {

namespace dot_bf16_path {

namespace {

constexpr float kMinNormal = 1.17549435e-38f;
inline float flush(float x) { return std::fabs(x) < kMinNormal ? std::copysign(0.0f, x) : x; }
inline float lo(uint32_t w) { return flush(std::bit_cast<float>(w << 16)); }
inline float hi(uint32_t w) { return flush(std::bit_cast<float>(w & 0xFFFF0000u)); }

#define REMAT_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

// MR rows x NV vectors of 16 columns (up to 6 x 4: 24 accumulators, as attention_tile's fp32 kernel),
// the last vector's columns masked by `last`. Fully unrolled (as attention_tile.cpp's micro) so the
// accumulators stay in registers.
template <int MR, int NV, bool ACC>
REMAT_BF16_TARGET void block(int64_t KP, const bf16x2* A, int64_t sa_r, int64_t sa_k, const bf16x2* B, int64_t ldb,
                             float* C, int64_t ldc, __mmask16 last) {
  __m512 c[MR][NV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      if constexpr (ACC)
        c[r][v] = v == NV - 1 ? _mm512_maskz_loadu_ps(last, C + r * ldc + 16 * v) : _mm512_loadu_ps(C + r * ldc + 16 * v);
      else
        c[r][v] = _mm512_setzero_ps();
    }
  for (int64_t kp = 0; kp < KP; ++kp) {
    __m512i b[NV];
    const bf16x2* bk = B + kp * ldb;
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v)
      b[v] = v == NV - 1 ? _mm512_maskz_loadu_epi32(last, bk + 16 * v) : _mm512_loadu_si512(bk + 16 * v);
    const bf16x2* ak = A + kp * sa_k;
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const __m512bh a = (__m512bh)_mm512_set1_epi32(int(ak[r * sa_r]));
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) c[r][v] = _mm512_dpbf16_ps(c[r][v], a, (__m512bh)b[v]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      if (v == NV - 1)
        _mm512_mask_storeu_ps(C + r * ldc + 16 * v, last, c[r][v]);
      else
        _mm512_storeu_ps(C + r * ldc + 16 * v, c[r][v]);
    }
}

using BlockFn = void (*)(int64_t, const bf16x2*, int64_t, int64_t, const bf16x2*, int64_t, float*, int64_t, __mmask16);
constexpr int kMR = 6;
#define REMAT_ROW(MR, ACC) {block<MR, 1, ACC>, block<MR, 2, ACC>, block<MR, 3, ACC>, block<MR, 4, ACC>}
#define REMAT_TABLE(ACC) \
  {REMAT_ROW(1, ACC), REMAT_ROW(2, ACC), REMAT_ROW(3, ACC), REMAT_ROW(4, ACC), REMAT_ROW(5, ACC), REMAT_ROW(6, ACC)}
constexpr BlockFn kBlocks[2][kMR][4] = {REMAT_TABLE(false), REMAT_TABLE(true)};
#undef REMAT_TABLE
#undef REMAT_ROW

inline __mmask16 mask_of(int64_t n) { return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1); }  // n >= 0

}  // namespace

void gemm_portable(bool acc, int64_t M, int64_t N, int64_t KP, const bf16x2* A, int64_t sa_r, int64_t sa_k,
                   const bf16x2* B, int64_t ldb, float* C, int64_t ldc) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      float c = acc ? C[m * ldc + n] : 0.0f;
      if (KP > 0) c = flush(c);  // vdpbf16ps reads its accumulator as zero when denormal
      for (int64_t kp = 0; kp < KP; ++kp) {
        const uint32_t a = A[m * sa_r + kp * sa_k], b = B[kp * ldb + n];
        c = flush(std::fma(hi(a), hi(b), c));
        c = flush(std::fma(lo(a), lo(b), c));
      }
      C[m * ldc + n] = c;
    }
}

REMAT_BF16_TARGET void gemm_avx512(bool acc, int64_t M, int64_t N, int64_t KP, const bf16x2* A, int64_t sa_r,
                                   int64_t sa_k, const bf16x2* B, int64_t ldb, float* C, int64_t ldc) {
  for (int64_t n0 = 0; n0 < N; n0 += 64) {
    const int64_t nn = std::min<int64_t>(64, N - n0), nv = (nn + 15) / 16;
    const __mmask16 last = mask_of(nn - 16 * (nv - 1));
    for (int64_t m0 = 0; m0 < M; m0 += kMR) {
      const int64_t mr = std::min<int64_t>(kMR, M - m0);
      kBlocks[acc][mr - 1][nv - 1](KP, A + m0 * sa_r, sa_r, sa_k, B + n0, ldb, C + m0 * ldc + n0, ldc, last);
    }
  }
}

namespace {

// AMX: every tile 16 rows x 64 bytes (16 fp32 or 16 bf16 pairs). Tiles 0-3 accumulate a 32 x 32 block
// of C (tile 2r + c: rows 16r.., columns 16c..), 4-5 hold A's two row tiles, 6-7 B's two column tiles.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

#define REMAT_AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f")))

// A tile's source: the caller's memory when the 16 x 16 block lies within (rows, cols) = (16, 16),
// else `scratch` holding the block padded with zeros. Returns the address; *stride gets its bytes.
inline const void* tile_src(const uint32_t* X, int64_t ldx, int64_t rows, int64_t cols, uint32_t* scratch,
                            int64_t* stride) {
  if (rows >= 16 && cols >= 16) {
    *stride = ldx * 4;
    return X;
  }
  for (int64_t r = 0; r < 16; ++r)
    for (int64_t c = 0; c < 16; ++c) scratch[r * 16 + c] = r < rows && c < cols ? X[r * ldx + c] : 0u;
  *stride = 64;
  return scratch;
}

}  // namespace

bool amx_available() {
  static const bool ok = [] {
    __builtin_cpu_init();
    unsigned a, b, c, d;
    if (!__builtin_cpu_supports("avx512bf16") || __get_cpuid_max(0, nullptr) < 7) return false;
    __cpuid_count(7, 0, a, b, c, d);
    if (!((d >> 22) & 1) || !((d >> 24) & 1)) return false;  // AMX-BF16, AMX-TILE
    constexpr long kReqPerm = 0x1023, kXtileData = 18;       // ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA
    return syscall(SYS_arch_prctl, kReqPerm, kXtileData) == 0;
  }();
  return ok;
}

REMAT_AMX_TARGET void gemm_amx(bool acc, int64_t M, int64_t N, int64_t KP, const bf16x2* A, int64_t lda,
                               const bf16x2* B, int64_t ldb, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  // Other code on this thread (oneDNN's AMX kernels) configures tiles its own way: reload ours unless
  // it is the one in force (ldtilecfg costs more than reading the configuration back).
  TileConfig cur;
  _tile_storeconfig(&cur);
  if (std::memcmp(&cur, &cfg, sizeof cfg) != 0) _tile_loadconfig(&cfg);
  alignas(64) uint32_t sa[2][256], sb[2][256];
  alignas(64) float sc[256];
  const uint32_t* a = A;
  const uint32_t* b = B;
  for (int64_t n0 = 0; n0 < N; n0 += 32) {
    const int64_t n1 = N - n0, n2 = n1 - 16;  // columns of the first and second column tile (clipped below)
    for (int64_t m0 = 0; m0 < M; m0 += 32) {
      const int64_t m1 = M - m0, m2 = m1 - 16;
      float* c00 = C + m0 * ldc + n0;
      // C tile (r, c) in or out through sc when it is not a whole 16 x 16 block of C.
      auto c_rows = [&](int r) { return std::min<int64_t>(16, r ? m2 : m1); };
      auto c_cols = [&](int c) { return std::min<int64_t>(16, c ? n2 : n1); };
      auto c_full = [&](int r, int c) { return c_rows(r) == 16 && c_cols(c) == 16; };
      auto c_in = [&](int r, int c) -> const float* {
        float* src = c00 + 16 * r * ldc + 16 * c;
        if (c_full(r, c)) return src;
        std::fill(sc, sc + 256, 0.f);
        for (int64_t i = 0; i < c_rows(r); ++i)
          for (int64_t j = 0; j < c_cols(c); ++j) sc[i * 16 + j] = src[i * ldc + j];
        return sc;
      };
      auto c_stride = [&](int r, int c) { return c_full(r, c) ? ldc * 4 : int64_t(64); };
      const bool r1 = m2 > 0, k1 = n2 > 0;  // second row tile, second column tile
      if (acc) {
        _tile_loadd(0, c_in(0, 0), c_stride(0, 0));
        if (k1) _tile_loadd(1, c_in(0, 1), c_stride(0, 1));
        if (r1) _tile_loadd(2, c_in(1, 0), c_stride(1, 0));
        if (r1 && k1) _tile_loadd(3, c_in(1, 1), c_stride(1, 1));
      } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
      }
      for (int64_t k0 = 0; k0 < KP; k0 += 16) {
        const int64_t kk = KP - k0;
        int64_t s0, s1;
        _tile_loadd(4, tile_src(a + m0 * lda + k0, lda, m1, kk, sa[0], &s0), s0);
        _tile_loadd(6, tile_src(b + k0 * ldb + n0, ldb, kk, n1, sb[0], &s1), s1);
        _tile_dpbf16ps(0, 4, 6);
        if (k1) {
          _tile_loadd(7, tile_src(b + k0 * ldb + n0 + 16, ldb, kk, n2, sb[1], &s1), s1);
          _tile_dpbf16ps(1, 4, 7);
        }
        if (r1) {
          _tile_loadd(5, tile_src(a + (m0 + 16) * lda + k0, lda, m2, kk, sa[1], &s0), s0);
          _tile_dpbf16ps(2, 5, 6);
          if (k1) _tile_dpbf16ps(3, 5, 7);
        }
      }
      // Out: straight into C for whole blocks, else through sc.
      auto c_out = [&](int r, int c) {
        float* dst = c00 + 16 * r * ldc + 16 * c;
        for (int64_t i = 0; i < c_rows(r); ++i)
          for (int64_t j = 0; j < c_cols(c); ++j) dst[i * ldc + j] = sc[i * 16 + j];
      };
      if (c_full(0, 0)) _tile_stored(0, c00, ldc * 4); else { _tile_stored(0, sc, 64); c_out(0, 0); }
      if (k1) {
        if (c_full(0, 1)) _tile_stored(1, c00 + 16, ldc * 4); else { _tile_stored(1, sc, 64); c_out(0, 1); }
      }
      if (r1) {
        if (c_full(1, 0)) _tile_stored(2, c00 + 16 * ldc, ldc * 4); else { _tile_stored(2, sc, 64); c_out(1, 0); }
      }
      if (r1 && k1) {
        if (c_full(1, 1)) _tile_stored(3, c00 + 16 * ldc + 16, ldc * 4); else { _tile_stored(3, sc, 64); c_out(1, 1); }
      }
    }
  }
}

}  // namespace dot_bf16_path

namespace {
std::atomic<bool> g_amx_allowed{true};
bool use_amx() {
  return g_amx_allowed.load(std::memory_order_relaxed) && bf16_isa() == Bf16Isa::Avx512Bf16 &&
         dot_bf16_path::amx_available();
}
}  // namespace

bool set_dot_bf16_amx(bool allowed) { return g_amx_allowed.exchange(allowed); }

void dot_bf16_gemm_rows(bool acc, int64_t M, int64_t N, int64_t KP, const bf16x2* A, int64_t lda, const bf16x2* B,
                        int64_t ldb, float* C, int64_t ldc) {
  if (use_amx())
    dot_bf16_path::gemm_amx(acc, M, N, KP, A, lda, B, ldb, C, ldc);
  else
    dot_bf16_gemm(acc, M, N, KP, A, lda, 1, B, ldb, C, ldc);
}

const char* dot_bf16_rows_path() { return use_amx() ? "amx_bf16" : bf16_isa_name(bf16_isa()); }

void dot_bf16_gemm(bool acc, int64_t M, int64_t N, int64_t KP, const bf16x2* A, int64_t sa_r, int64_t sa_k,
                   const bf16x2* B, int64_t ldb, float* C, int64_t ldc) {
  if (bf16_isa() == Bf16Isa::Avx512Bf16)
    dot_bf16_path::gemm_avx512(acc, M, N, KP, A, sa_r, sa_k, B, ldb, C, ldc);
  else
    dot_bf16_path::gemm_portable(acc, M, N, KP, A, sa_r, sa_k, B, ldb, C, ldc);
}

}  // namespace remat::kernels
