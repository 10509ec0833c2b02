// The bf16 naive attention against the fp32 kernel (attention.h) on the same bf16 values widened,
// with and without dropout, multi-head and grouped-query, odd T and odd HS, on every product path
// the CPU has (AMX, AVX512_BF16, portable); the AVX512_BF16 and portable paths bit for bit;
// thread-count independence and probs-only recompute bit for bit on each path; and the pair
// micro-kernels alone (the AMX one: edges, padding, blocking).
#include "kernels/attention_bf16.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "attention_bf16_twin.h"
#include "fd_check.h"
#include "kernels/attention.h"
#include "kernels/bf16.h"
#include "kernels/dot_bf16.h"

using namespace remat::kernels;
using namespace remat::test;

namespace {

constexpr uint64_t kSeed = 0x5eed1234abcdull, kOffset = 977;
using Dims = AttnDims;


struct Run16 {
  std::vector<bf16> out, probs, dqkv;
};
Run16 run16(const Dims& d, const std::vector<bf16>& qkv, const std::vector<bf16>& dout, const std::vector<bf16>& dqkv0,
            float p, int threads = 2) {
  Run16 r;
  r.out.assign(d.out_size(), float_to_bf16(-7.f));
  r.probs.assign(d.probs_size(), float_to_bf16(-7.f));
  r.dqkv = dqkv0;
  std::vector<float> ws(attention_bf16_workspace_floats(d.B, d.T, d.NH, d.KVH, d.HS, threads), std::nanf(""));
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  attention_bf16_forward(r.out, r.probs, qkv, d.B, d.T, d.NH, d.KVH, d.HS, p, kSeed, kOffset, ws);
  attention_bf16_backward(r.dqkv, dout, qkv, r.probs, d.B, d.T, d.NH, d.KVH, d.HS, p, kSeed, kOffset, ws);
  omp_set_num_threads(saved);
  return r;
}

struct Run32 {
  std::vector<float> out, probs, dqkv;
};
Run32 run32(const Dims& d, const std::vector<float>& qkv, const std::vector<float>& dout,
            const std::vector<float>& dqkv0, float p) {
  Run32 r;
  r.out.assign(d.out_size(), 0.f);
  r.probs.assign(d.probs_size(), 0.f);
  r.dqkv = dqkv0;
  std::vector<float> ws(attention_workspace_floats(d.B, d.T, d.NH, d.KVH, d.HS, omp_get_max_threads()));
  attention_forward(r.out, r.probs, qkv, d.B, d.T, d.NH, d.KVH, d.HS, p, kSeed, kOffset, ws);
  attention_backward(r.dqkv, dout, qkv, r.probs, d.B, d.T, d.NH, d.KVH, d.HS, p, kSeed, kOffset, ws);
  return r;
}

const Dims kDims[] = {{2, 100, 4, 2, 16}, {1, 67, 2, 2, 7}, {1, 130, 3, 1, 32}};

}  // namespace

// Tolerances against the fp32 kernel on the same (bf16) inputs:
//  - probs: the scores differ from fp32's only in summation order and the softmax's exp (exp_fast
//    here, exp512 there), a few fp32 ulps, then one rounding: one bf16 ulp.
//  - out: one rounding to bf16 is off by at most 2^-8 relative (8 significant bits). P is rounded,
//    and under dropout Pd = P / (1-p) once more, before P V: each term off by at most 2^-7, so
//    |out - ref| <= 2^-7 * sum_j Pd_ij |v_j| (computed as the fp32 kernel on |V|), plus the output's
//    own rounding, 2^-8 |ref|.
//  - dqkv: dS is formed from bf16 P and rounded to bf16, so each gradient is a sum of terms each off
//    by up to 2^-7 relative, and the terms cancel: bounded by 2^-6 of the largest |gradient| of its
//    part (Q, K or V) plus 2^-7 of its own magnitude. Measured worst case: under a third of 2^-6.
//  A wrong scale, mask, head mapping, dropout mask or missing term moves results by O(1) of those.
TEST(AttentionBf16, MatchesFp32Kernel) {
  for (const Bf16Path& path : bf16_paths())
  for (const Dims& d : kDims)
    for (float p : {0.f, 0.1f}) {
      const UseBf16Path use(path);
      const std::string at = std::string(path.name) + " " + d.str() + " p=" + std::to_string(p);
      const auto qkv = b16(randn(d.qkv_size(), 1, 1.5f)), dout = b16(randn(d.out_size(), 2));
    const auto dq0 = b16(randn(d.qkv_size(), 3));
      const Run16 r = run16(d, qkv, dout, dq0, p);
      const auto qkvf = f32(qkv);
      const Run32 ref = run32(d, qkvf, f32(dout), f32(dq0), p);
      for (int64_t i = 0; i < d.probs_size(); ++i)
        ASSERT_LE(std::abs(ord(r.probs[i]) - ord(float_to_bf16(ref.probs[i]))), 1)
            << at << " probs " << i << ": " << bf16_to_float(r.probs[i]) << " vs " << ref.probs[i];
      const Run32 mag = run32(d, with_abs_v(d, qkvf), f32(dout), f32(dq0), p);
      ASSERT_NO_FATAL_FAILURE(expect_out_near(r.out, ref.out, mag.out, at));
      // The gradient added by the kernel, per part (Q, K, V columns).
      ASSERT_NO_FATAL_FAILURE(expect_dqkv_near(d, f32(r.dqkv), f32(dq0), ref.dqkv, at));
    }
}

TEST(AttentionBf16, PathsThreadsAndRecomputeBitIdentical) {
  const Dims d{2, 100, 4, 2, 16};
  const auto qkv = b16(randn(d.qkv_size(), 4, 1.5f)), dout = b16(randn(d.out_size(), 5));
  const auto dq0 = b16(randn(d.qkv_size(), 6));
  expect_runs_bit_identical(
      [&](float p, int threads) { return run16(d, qkv, dout, dq0, p, threads); },
      [](const Run16& a, const Run16& b) {
        return same_bits(a.out, b.out) && same_bits(a.probs, b.probs) && same_bits(a.dqkv, b.dqkv);
      },
      [&](const Run16& a, const std::string& at) {
        std::vector<bf16> probs(d.probs_size(), float_to_bf16(-3.f));
        std::vector<float> ws(attention_bf16_workspace_floats(d.B, d.T, d.NH, d.KVH, d.HS, 2));
        attention_bf16_probs_forward(probs, qkv, d.B, d.T, d.NH, d.KVH, d.HS, ws);
        EXPECT_TRUE(same_bits(probs, a.probs)) << "probs-only recompute, " << at;
      });
}

// The AMX product (dot_bf16_gemm_rows) on edge shapes: it reads nothing outside M x KP of A and
// KP x N of B (NaN there would spread into C), writes nothing outside M x N of C, agrees with the
// portable emulation to fp32 rounding, gives the same bits however the caller blocks rows and
// columns, and the same bits when KP is extended by zero pairs (the naive kernel's P V runs each
// group of queries over the keys it needs; a row's zeros past its diagonal must add nothing).
TEST(AttentionBf16, AmxRowsKernelEdgesAndBlocking) {
  if (!dot_bf16_path::amx_available()) GTEST_SKIP() << "no AMX-BF16 on this CPU";
  const UseBf16Path use(bf16_paths().front());
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  auto word = [&] { return uint32_t(float_to_bf16(nd(rng)).bits) | (uint32_t(float_to_bf16(nd(rng)).bits) << 16); };
  const uint32_t nan_word = 0x7FC07FC0u;
  const float sentinel = std::bit_cast<float>(0x7FC01234u);
  for (auto [M, N, KP] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {37, 45, 21}, {64, 64, 32}, {16, 16, 16}, {5, 3, 1}, {33, 17, 48}, {1, 70, 7}, {20, 9, 0}})
    for (bool acc : {false, true}) {
      const std::string at = "M=" + std::to_string(M) + " N=" + std::to_string(N) + " KP=" + std::to_string(KP) +
                             " acc=" + std::to_string(acc);
      const int64_t KPx = KP + 5, lda = KPx + 3, ldb = N + 7, ldc = N + 2;  // KPx: KP and 5 zero pairs
      std::vector<uint32_t> A(M * lda + 16 * lda, nan_word), B((KPx + 16) * ldb, nan_word);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t k = 0; k < KPx; ++k) A[m * lda + k] = k < KP ? word() : 0u;
      for (int64_t k = 0; k < KPx; ++k)
        for (int64_t n = 0; n < N; ++n) B[k * ldb + n] = k < KP ? word() : 0u;
      std::vector<float> C0((M + 16) * ldc, sentinel);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) C0[m * ldc + n] = nd(rng);
      auto ref = C0, got = C0, blocked = C0, longer = C0;
      dot_bf16_path::gemm_portable(acc, M, N, KP, A.data(), lda, 1, B.data(), ldb, ref.data(), ldc);
      dot_bf16_gemm_rows(acc, M, N, KP, A.data(), lda, B.data(), ldb, got.data(), ldc);
      for (int64_t m0 = 0; m0 < M; m0 += 7)
        for (int64_t n0 = 0; n0 < N; n0 += 13)
          dot_bf16_gemm_rows(acc, std::min<int64_t>(7, M - m0), std::min<int64_t>(13, N - n0), KP, A.data() + m0 * lda,
                             lda, B.data() + n0, ldb, blocked.data() + m0 * ldc + n0, ldc);
      dot_bf16_gemm_rows(acc, M, N, KPx, A.data(), lda, B.data(), ldb, longer.data(), ldc);
      for (int64_t i = 0; i < int64_t(C0.size()); ++i) {
        const int64_t m = i / ldc, n = i % ldc;
        if (m >= M || n >= N) {
          ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(sentinel)) << at << ": wrote outside C at " << i;
          continue;
        }
        double mag = acc ? std::fabs(C0[i]) : 0.0;  // sum of |terms|
        for (int64_t k = 0; k < KP; ++k) {
          const uint32_t a = A[m * lda + k], b = B[k * ldb + n];
          mag += std::fabs(double(std::bit_cast<float>(a << 16)) * std::bit_cast<float>(b << 16)) +
                 std::fabs(double(std::bit_cast<float>(a & 0xFFFF0000u)) * std::bit_cast<float>(b & 0xFFFF0000u));
        }
        ASSERT_NEAR(got[i], ref[i], 1e-6 * mag + 1e-30) << at << " at m=" << m << " n=" << n;
        ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(blocked[i])) << at << ": blocking, m=" << m << " n=" << n;
        ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(longer[i])) << at << ": zero pairs, m=" << m << " n=" << n;
      }
    }
}

// The micro-kernel's two paths on every kind of value (random bit patterns: NaN, inf, denormals,
// zeros included), odd sizes, accumulate or not.
TEST(AttentionBf16, DotKernelPathsIdentical) {
  if (bf16_cpu_isa() != Bf16Isa::Avx512Bf16) GTEST_SKIP() << "no AVX512_BF16 on this CPU";
  std::mt19937 rng(7);
  for (auto [M, N, KP] : {std::tuple<int64_t, int64_t, int64_t>{5, 37, 9}, {16, 64, 32}, {3, 7, 1}, {9, 16, 0}})
    for (bool acc : {false, true})
      for (bool wild : {false, true}) {
        const int64_t sa_r = KP + 1, ldb = N + 3, ldc = N + 2;
        std::vector<uint32_t> A(M * sa_r + 1), B(std::max<int64_t>(KP, 1) * ldb);
        auto gen = [&]() -> uint32_t {
          if (wild) return rng();
          // Normal-range bf16 pairs, occasionally tiny (denormal products and sums).
          auto h = [&]() { return uint32_t(((rng() & 1) << 15) | ((rng() % 8 == 0 ? rng() % 4 : 100 + rng() % 50) << 7) | (rng() & 0x7F)); };
          return h() | (h() << 16);
        };
        for (auto& x : A) x = gen();
        for (auto& x : B) x = gen();
        std::vector<float> C0(M * ldc);
        for (auto& x : C0) x = wild ? std::bit_cast<float>(uint32_t(rng())) : std::ldexp(float(int(rng() % 2001) - 1000), -int(rng() % 140));
        auto c1 = C0, c2 = C0;
        dot_bf16_path::gemm_portable(acc, M, N, KP, A.data(), sa_r, 1, B.data(), ldb, c1.data(), ldc);
        dot_bf16_path::gemm_avx512(acc, M, N, KP, A.data(), sa_r, 1, B.data(), ldb, c2.data(), ldc);
        for (int64_t i = 0; i < M * ldc; ++i) {
          const float x = c1[i], y = c2[i];
          ASSERT_TRUE(std::bit_cast<uint32_t>(x) == std::bit_cast<uint32_t>(y) || (std::isnan(x) && std::isnan(y)))
              << "M=" << M << " N=" << N << " KP=" << KP << " acc=" << acc << " wild=" << wild << " at " << i << ": " << x
              << " vs " << y;
        }
      }
}
