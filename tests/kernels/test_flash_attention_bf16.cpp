// The bf16 flash attention against the fp32 flash kernel (flash_attention.h) on the same bf16 values
// widened, with and without dropout, multi-head and grouped-query, odd T and HS, on every product
// path the CPU has (AMX, AVX512_BF16, portable); the AVX512_BF16 and portable paths bit for bit;
// run-to-run and thread-count independence on each path.
#include "kernels/flash_attention_bf16.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "attention_bf16_twin.h"
#include "fd_check.h"
#include "kernels/bf16.h"
#include "kernels/dot_bf16.h"
#include "kernels/flash_attention.h"

using namespace remat::kernels;
using namespace remat::test;

namespace {

constexpr uint64_t kSeed = 0x5eed1234abcdull, kOffset = 977;
using Dims = AttnDims;


struct Run16 {
  std::vector<bf16> out, dqkv;
  std::vector<float> lse;
};
Run16 run16(const Dims& d, const std::vector<bf16>& qkv, const std::vector<bf16>& dout, const std::vector<bf16>& dq0,
            float p, int threads = 2) {
  Run16 r;
  r.out.assign(d.out_size(), float_to_bf16(-7.f));
  r.lse.assign(d.B * d.NH * d.T, -7.f);
  r.dqkv = dq0;
  std::vector<float> ws(flash_attention_bf16_workspace_floats(d.B, d.T, d.NH, d.KVH, d.HS, threads), std::nanf(""));
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  flash_attention_bf16_forward(r.out, r.lse, qkv, d.B, d.T, d.NH, d.KVH, d.HS, p, kSeed, kOffset, ws);
  flash_attention_bf16_backward(r.dqkv, dout, qkv, r.out, r.lse, d.B, d.T, d.NH, d.KVH, d.HS, p, kSeed, kOffset, ws);
  omp_set_num_threads(saved);
  return r;
}

struct Run32 {
  std::vector<float> out, lse, dqkv;
};
Run32 run32(const Dims& d, const std::vector<float>& qkv, const std::vector<float>& dout,
            const std::vector<float>& dq0, float p) {
  Run32 r;
  r.out.assign(d.out_size(), 0.f);
  r.lse.assign(d.B * d.NH * d.T, 0.f);
  r.dqkv = dq0;
  std::vector<float> ws(flash_attention_workspace_floats(d.B, d.T, d.NH, d.KVH, d.HS, omp_get_max_threads()));
  flash_attention_forward(r.out, r.lse, qkv, d.B, d.T, d.NH, d.KVH, d.HS, p, kSeed, kOffset, ws);
  flash_attention_backward(r.dqkv, dout, qkv, r.out, r.lse, d.B, d.T, d.NH, d.KVH, d.HS, p, kSeed, kOffset, ws);
  return r;
}

const Dims kDims[] = {{1, 256, 2, 2, 8}, {2, 100, 4, 2, 16}, {1, 67, 2, 2, 7}, {1, 130, 3, 1, 32}};

}  // namespace

// Tolerances against the fp32 flash kernel on the same inputs, as test_attention_bf16.cpp argues:
//  - out: each tile's probabilities (with the dropout scale) are rounded once to bf16 before P V, at
//    most 2^-8 relative per term: |out - ref| <= 2^-8 sum_j Pd_ij |v_j| (the fp32 kernel on |V|),
//    doubled for margin, plus the output's rounding, 2^-8 |ref|.
//  - lse: fp32 on both sides from the same scores up to summation order and exp: 1e-5 (1 + |lse|).
//  - dqkv: bf16 P, dS and O (in D = dO . O) each round at 2^-8, and terms cancel: 2^-6 of the part's
//    largest gradient plus 2^-7 of its own magnitude. Measured worst case: about half of 2^-6.
TEST(FlashAttentionBf16, MatchesFp32Kernel) {
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
      const Run32 mag = run32(d, with_abs_v(d, qkvf), f32(dout), f32(dq0), p);
      for (size_t i = 0; i < r.lse.size(); ++i)
        ASSERT_NEAR(r.lse[i], ref.lse[i], 1e-5 * (1 + std::fabs(ref.lse[i]))) << at << " lse " << i;
      ASSERT_NO_FATAL_FAILURE(expect_out_near(r.out, ref.out, mag.out, at));
      ASSERT_NO_FATAL_FAILURE(expect_dqkv_near(d, f32(r.dqkv), f32(dq0), ref.dqkv, at));
    }
}

TEST(FlashAttentionBf16, PathsAndThreadsBitIdentical) {
  const Dims d{2, 100, 4, 2, 16};
  const auto qkv = b16(randn(d.qkv_size(), 4, 1.5f)), dout = b16(randn(d.out_size(), 5));
  const auto dq0 = b16(randn(d.qkv_size(), 6));
  expect_runs_bit_identical(
      [&](float p, int threads) { return run16(d, qkv, dout, dq0, p, threads); },
      [](const Run16& a, const Run16& b) {
        return same_bits(a.out, b.out) && same_bits(a.lse, b.lse) && same_bits(a.dqkv, b.dqkv);
      },
      [](const Run16&, const std::string&) {});
}
