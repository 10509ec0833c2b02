// bf16 RoPE (rope_bf16.h) against its fp32 twin (rope.h) on the same bf16 q, k, v widened to fp32: every
// rotated value is the twin's expression in fp32 rounded once, so within one bf16 ulp of the twin's
// output rounded (FMA contraction may differ; a value that cancels to near zero may be off by a few
// fp32 ulps of its terms, 1e-6 of the largest value); v is copied bit for bit. The backward adds the
// transposed rotation into pre-filled gradients and is held to the twin's backward (finite-difference
// checked in test_rope.cpp) the same way: a zero, negated, un-rotated or non-accumulated gradient
// is off by many ulps.
#include <gtest/gtest.h>
#include <omp.h>

#include <vector>

#include "bf16_twin.h"
#include "fd_check.h"
#include "kernels/rope.h"
#include "kernels/rope_bf16.h"

using namespace remat::kernels;
using namespace remat::test;

namespace {

struct Shape {
  int64_t B, T, NH, KVH, HS;
};
// MHA, GQA (NH = 4, KVH = 2), an odd half-head (HS/2 = 5), a LLaMA head, and a head wider than the
// kernel's 512-pair stack buffer (HS/2 = 530).
const Shape kShapes[] = {{2, 5, 2, 2, 8}, {2, 7, 4, 2, 16}, {1, 6, 4, 1, 10}, {2, 9, 4, 2, 128}, {1, 3, 2, 1, 1060}};

struct Case {
  Shape sh;
  std::vector<float> cos, sin;
  std::vector<bf16> q, k, v;
  Case(const Shape& s, uint64_t seed) : sh(s) {
    const int64_t H = s.HS / 2;
    cos.resize(s.T * H);
    sin.resize(s.T * H);
    rope_table(cos, sin, s.T, s.HS, 10000.0f);
    q = b16(randn(s.B * s.T * s.NH * s.HS, seed));
    k = b16(randn(s.B * s.T * s.KVH * s.HS, seed + 1));
    v = b16(randn(s.B * s.T * s.KVH * s.HS, seed + 2));
  }
  int64_t n3() const { return sh.B * sh.T * (sh.NH + 2 * sh.KVH) * sh.HS; }
};

}  // namespace

TEST(RopeBf16, ForwardMatchesFp32Twin) {
  for (const auto& sh : kShapes) {
    const Case c(sh, 1);
    const auto [B, T, NH, KVH, HS] = sh;
    std::vector<bf16> qkv(c.n3());
    rope_qkv_bf16_forward(qkv, c.q, c.k, c.v, c.cos, c.sin, B, T, NH, KVH, HS);
    std::vector<float> ref(c.n3());
    rope_qkv_forward(ref, f32(c.q), f32(c.k), f32(c.v), c.cos, c.sin, B, T, NH, KVH, HS);
    expect_within_1ulp(qkv, ref, "qkv, HS=" + std::to_string(HS), 1e-6);
    // The v part is a copy: identical bits.
    const int64_t QC = NH * HS, KC = KVH * HS, C3 = QC + 2 * KC;
    for (int64_t bt = 0; bt < B * T; ++bt)
      for (int64_t j = 0; j < KC; ++j) ASSERT_EQ(qkv[bt * C3 + QC + KC + j].bits, c.v[bt * KC + j].bits);
  }
}

TEST(RopeBf16, BackwardMatchesFp32TwinAndAccumulates) {
  for (const auto& sh : kShapes) {
    const Case c(sh, 4);
    const auto [B, T, NH, KVH, HS] = sh;
    const auto g = b16(randn(c.n3(), 7));
    // Pre-filled gradients: the kernel must add into them.
    const auto dq0 = b16(randn(c.q.size(), 8)), dk0 = b16(randn(c.k.size(), 9)), dv0 = b16(randn(c.v.size(), 10));
    auto dq = dq0, dk = dk0, dv = dv0;
    rope_qkv_bf16_backward(dq, dk, dv, g, c.cos, c.sin, B, T, NH, KVH, HS);
    auto rq = f32(dq0), rk = f32(dk0), rv = f32(dv0);
    rope_qkv_backward(rq, rk, rv, f32(g), c.cos, c.sin, B, T, NH, KVH, HS);
    const std::string at = ", HS=" + std::to_string(HS);
    expect_within_1ulp(dq, rq, "dq" + at, 1e-6);
    expect_within_1ulp(dk, rk, "dk" + at, 1e-6);
    expect_bits_of_rounded(dv, rv, "dv" + at);  // one exact sum of two bf16 values, rounded once
  }
}

TEST(RopeBf16, EmptyGradientsAreSkipped) {
  const Shape sh{2, 5, 4, 2, 16};
  const Case c(sh, 11);
  const auto [B, T, NH, KVH, HS] = sh;
  const auto g = b16(randn(c.n3(), 12));
  const auto dq0 = b16(randn(c.q.size(), 13)), dk0 = b16(randn(c.k.size(), 14)), dv0 = b16(randn(c.v.size(), 15));
  auto dq = dq0, dk = dk0, dv = dv0;
  rope_qkv_bf16_backward(dq, dk, dv, g, c.cos, c.sin, B, T, NH, KVH, HS);
  auto only_k = dk0;
  rope_qkv_bf16_backward({}, only_k, {}, g, c.cos, c.sin, B, T, NH, KVH, HS);
  expect_bits_of_rounded(only_k, f32(dk), "dk alone");
  auto only_qv_q = dq0, only_qv_v = dv0;
  rope_qkv_bf16_backward(only_qv_q, {}, only_qv_v, g, c.cos, c.sin, B, T, NH, KVH, HS);
  expect_bits_of_rounded(only_qv_q, f32(dq), "dq without dk");
  expect_bits_of_rounded(only_qv_v, f32(dv), "dv without dk");
}

TEST(RopeBf16, IndependentOfThreadCount) {
  const Shape sh{2, 9, 4, 2, 128};
  const Case c(sh, 16);
  const auto [B, T, NH, KVH, HS] = sh;
  const auto g = b16(randn(c.n3(), 17));
  auto run = [&](int threads) {
    const int nt = omp_get_max_threads();
    omp_set_num_threads(threads);
    std::vector<bf16> qkv(c.n3()), dq(c.q.size()), dk(c.k.size()), dv(c.v.size());
    rope_qkv_bf16_forward(qkv, c.q, c.k, c.v, c.cos, c.sin, B, T, NH, KVH, HS);
    rope_qkv_bf16_backward(dq, dk, dv, g, c.cos, c.sin, B, T, NH, KVH, HS);
    omp_set_num_threads(nt);
    return std::tuple{f32(qkv), f32(dq), f32(dk), f32(dv)};
  };
  const auto [a0, a1, a2, a3] = run(1);
  const auto [b0, b1, b2, b3] = run(2);
  EXPECT_TRUE(bit_equal(a0, b0) && bit_equal(a1, b1) && bit_equal(a2, b2) && bit_equal(a3, b3));
}
