// bf16 RoPE (rope.h on bf16) against the fp32 kernel on the same bf16 q, k, v widened to fp32: every
// rotated value is the twin's expression in fp32 rounded once, so within one bf16 ulp of the twin's
// output rounded (FMA contraction may differ; a value that cancels to near zero may be off by a few
// fp32 ulps of its terms, 1e-6 of the largest value); v is copied bit for bit. The backward adds the
// transposed rotation into pre-filled gradients and is held to the twin's backward (finite-difference
// checked in test_rope.cpp) the same way: a zero, negated, un-rotated or non-accumulated gradient
// is off by many ulps.
#include <gtest/gtest.h>
#include <omp.h>

#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "bf16_twin.h"
#include "fd_check.h"
#include "kernels/rope.h"
#include "rope_case.h"

using namespace remat::kernels;
using namespace remat::test;

namespace {

using Shape = RopeShape;
// MHA, GQA (NH = 4, KVH = 2), an odd half-head (HS/2 = 5), a LLaMA head, and a head wider than the
// kernel's 512-pair stack buffer (HS/2 = 530).
const Shape kShapes[] = {{2, 5, 2, 2, 8}, {2, 7, 4, 2, 16}, {1, 6, 4, 1, 10}, {2, 9, 4, 2, 128}, {1, 3, 2, 1, 1060}};

// A problem from one seed: tables, inputs q, k, v, an upstream gradient g of qkv and pre-filled
// gradients dq0, dk0, dv0 (the backward must add into them).
struct Case {
  Shape sh;
  RopeTables tb;
  std::vector<bf16> q, k, v, g, dq0, dk0, dv0;
  Case(const Shape& s, uint64_t seed) : sh(s), tb(rope_tables(s.T, s.HS)) {
    const int64_t BT = s.B * s.T;
    q = b16(randn(BT * s.QC(), seed));
    k = b16(randn(BT * s.KC(), seed + 1));
    v = b16(randn(BT * s.KC(), seed + 2));
    g = b16(randn(BT * s.C3(), seed + 3));
    dq0 = b16(randn(q.size(), seed + 4));
    dk0 = b16(randn(k.size(), seed + 5));
    dv0 = b16(randn(v.size(), seed + 6));
  }
  int64_t n3() const { return sh.B * sh.T * sh.C3(); }
  void forward(std::vector<bf16>& qkv) const {
    rope_qkv_forward<bf16>(qkv, q, k, v, tb.cos, tb.sin, sh.B, sh.T, sh.NH, sh.KVH, sh.HS);
  }
  // Adds into whichever of dq, dk, dv is non-empty.
  void backward(std::span<bf16> dq, std::span<bf16> dk, std::span<bf16> dv) const {
    rope_qkv_backward<bf16>(dq, dk, dv, g, tb.cos, tb.sin, sh.B, sh.T, sh.NH, sh.KVH, sh.HS);
  }
};

}  // namespace

TEST(RopeBf16, ForwardMatchesFp32Twin) {
  for (const auto& sh : kShapes) {
    const Case c(sh, 1);
    const auto [B, T, NH, KVH, HS] = sh;
    std::vector<bf16> qkv(c.n3());
    c.forward(qkv);
    std::vector<float> ref(c.n3());
    rope_qkv_forward<float>(ref, f32(c.q), f32(c.k), f32(c.v), c.tb.cos, c.tb.sin, B, T, NH, KVH, HS);
    expect_within_1ulp(qkv, ref, "qkv, HS=" + std::to_string(HS), 1e-6);
    // The v part is a copy: identical bits.
    const int64_t QC = sh.QC(), KC = sh.KC(), C3 = sh.C3();
    for (int64_t bt = 0; bt < B * T; ++bt)
      for (int64_t j = 0; j < KC; ++j) ASSERT_EQ(qkv[bt * C3 + QC + KC + j].bits, c.v[bt * KC + j].bits);
  }
}

TEST(RopeBf16, BackwardMatchesFp32TwinAndAccumulates) {
  for (const auto& sh : kShapes) {
    const Case c(sh, 4);
    const auto [B, T, NH, KVH, HS] = sh;
    auto dq = c.dq0, dk = c.dk0, dv = c.dv0;
    c.backward(dq, dk, dv);
    auto rq = f32(c.dq0), rk = f32(c.dk0), rv = f32(c.dv0);
    rope_qkv_backward<float>(rq, rk, rv, f32(c.g), c.tb.cos, c.tb.sin, B, T, NH, KVH, HS);
    const std::string at = ", HS=" + std::to_string(HS);
    expect_within_1ulp(dq, rq, "dq" + at, 1e-6);
    expect_within_1ulp(dk, rk, "dk" + at, 1e-6);
    expect_bits_of_rounded(dv, rv, "dv" + at);  // one exact sum of two bf16 values, rounded once
  }
}

TEST(RopeBf16, EmptyGradientsAreSkipped) {
  const Case c(Shape{2, 5, 4, 2, 16}, 11);
  auto dq = c.dq0, dk = c.dk0, dv = c.dv0;
  c.backward(dq, dk, dv);
  auto only_k = c.dk0;
  c.backward({}, only_k, {});
  expect_bits_of_rounded(only_k, f32(dk), "dk alone");
  auto only_qv_q = c.dq0, only_qv_v = c.dv0;
  c.backward(only_qv_q, {}, only_qv_v);
  expect_bits_of_rounded(only_qv_q, f32(dq), "dq without dk");
  expect_bits_of_rounded(only_qv_v, f32(dv), "dv without dk");
}

TEST(RopeBf16, IndependentOfThreadCount) {
  const Case c(Shape{2, 9, 4, 2, 128}, 16);
  auto run = [&](int threads) {
    const int nt = omp_get_max_threads();
    omp_set_num_threads(threads);
    std::vector<bf16> qkv(c.n3()), dq(c.q.size()), dk(c.k.size()), dv(c.v.size());
    c.forward(qkv);
    c.backward(dq, dk, dv);
    omp_set_num_threads(nt);
    return std::tuple{f32(qkv), f32(dq), f32(dk), f32(dv)};
  };
  const auto [a0, a1, a2, a3] = run(1);
  const auto [b0, b1, b2, b3] = run(2);
  EXPECT_TRUE(bit_equal(a0, b0) && bit_equal(a1, b1) && bit_equal(a2, b2) && bit_equal(a3, b3));
}
