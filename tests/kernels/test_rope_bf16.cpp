// Rotary position embeddings (RoPE, Su et al. 2021; rope.h) on bf16 and on fp32 q, k, v against an
// independent reference written here as plain loops in double precision: its own cos/sin of
// angle(t, i) = t * theta^(-2i/HS) (not rope_table's), the rotate-half pairs (x[i], x[i + HS/2]) of
// each q and k head rotated by [[c, -s], [s, c]], packed per token as [q heads | k heads | v heads]
// with v copied, and the backward as the transposed matrix applied to the upstream gradient and added
// into pre-filled gradients (dv += the v part). The kernel is one template over the storage type, so
// a bf16 result is not compared with the fp32 kernel's (that would compare the template with itself).
// A bf16 run's reference takes the bf16 inputs widened to fp32.
//
// Tolerances. The kernel rotates in fp32 with the tables rounded to fp32, a few fp32 ulps of the
// terms off the double result. fp32: within 1e-5 of the tensor's largest value. bf16: within one bf16
// ulp of the double result rounded to bf16 (the kernel rounds once; its fp32 error can move a value
// across one rounding boundary), or, where the two terms cancel to near zero, 1e-6 of the tensor's
// largest value. v is copied bit for bit, and dv is dv0 + dqkv_v added in fp32 in a plain loop and
// rounded once (bf16) or not at all (fp32): the kernel must give those bits. A zero, negated,
// un-rotated, wrongly paired or non-accumulated gradient, a wrong angle or a second rounding is
// off by many ulps.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
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
constexpr double kTheta = 10000.0;  // LLaMA's, as rope_tables() builds by default


// A problem from one seed: tables, inputs q, k, v, an upstream gradient g of qkv and pre-filled
// gradients dq0, dk0, dv0 (the backward must add into them), stored as S.
template <class S>
struct Case {
  Shape sh;
  RopeTables tb;
  std::vector<S> q, k, v, g, dq0, dk0, dv0;
  Case(const Shape& s, uint64_t seed) : sh(s), tb(rope_tables(s.T, s.HS, float(kTheta))) {
    const int64_t BT = s.B * s.T;
    q = stored<S>(randn(BT * s.QC(), seed));
    k = stored<S>(randn(BT * s.KC(), seed + 1));
    v = stored<S>(randn(BT * s.KC(), seed + 2));
    g = stored<S>(randn(BT * s.C3(), seed + 3));
    dq0 = stored<S>(randn(q.size(), seed + 4));
    dk0 = stored<S>(randn(k.size(), seed + 5));
    dv0 = stored<S>(randn(v.size(), seed + 6));
  }
  int64_t n3() const { return sh.B * sh.T * sh.C3(); }
  void forward(std::vector<S>& qkv) const {
    rope_qkv_forward<S>(qkv, q, k, v, tb.cos, tb.sin, sh.B, sh.T, sh.NH, sh.KVH, sh.HS);
  }
  // Adds into whichever of dq, dk, dv is non-empty.
  void backward(std::span<S> dq, std::span<S> dk, std::span<S> dv) const {
    rope_qkv_backward<S>(dq, dk, dv, g, tb.cos, tb.sin, sh.B, sh.T, sh.NH, sh.KVH, sh.HS);
  }
};

// The rotation of pair i of a head at position t, in double: (lo, hi) -> M (lo, hi).
struct Rot {
  double m[2][2];
};
Rot rotation(int64_t t, int64_t i, int64_t HS) {
  const double angle = double(t) * std::pow(kTheta, -2.0 * double(i) / double(HS));
  const double c = std::cos(angle), s = std::sin(angle);
  return Rot{{{c, -s}, {s, c}}};
}

// The reference forward: qkv (B*T, C3) from q, k, v; every q and k head rotated pair by pair.
std::vector<double> reference_forward(const Shape& sh, const std::vector<float>& q, const std::vector<float>& k,
                                      const std::vector<float>& v) {
  const int64_t H = sh.HS / 2, QC = sh.QC(), KC = sh.KC(), C3 = sh.C3();
  std::vector<double> out(sh.B * sh.T * C3);
  for (int64_t b = 0; b < sh.B; ++b)
    for (int64_t t = 0; t < sh.T; ++t) {
      const int64_t bt = b * sh.T + t;
      double* o = out.data() + bt * C3;
      // (source row, its offset in the packed token, number of heads) for q, then k.
      const std::tuple<const float*, int64_t, int64_t> parts[] = {{q.data() + bt * QC, 0, sh.NH},
                                                                  {k.data() + bt * KC, QC, sh.KVH}};
      for (const auto& [x, off, heads] : parts)
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t i = 0; i < H; ++i) {
            const Rot r = rotation(t, i, sh.HS);
            const double lo = x[h * sh.HS + i], hi = x[h * sh.HS + i + H];
            o[off + h * sh.HS + i] = r.m[0][0] * lo + r.m[0][1] * hi;
            o[off + h * sh.HS + i + H] = r.m[1][0] * lo + r.m[1][1] * hi;
          }
      for (int64_t j = 0; j < KC; ++j) o[QC + KC + j] = v[bt * KC + j];
    }
  return out;
}

// The reference backward for q and k: dx += M^T dy per pair (M's transpose, written as such).
void reference_backward(const Shape& sh, const std::vector<float>& g, std::vector<double>& dq,
                        std::vector<double>& dk) {
  const int64_t H = sh.HS / 2, QC = sh.QC(), KC = sh.KC(), C3 = sh.C3();
  for (int64_t b = 0; b < sh.B; ++b)
    for (int64_t t = 0; t < sh.T; ++t) {
      const int64_t bt = b * sh.T + t;
      const float* gy = g.data() + bt * C3;
      const std::tuple<double*, int64_t, int64_t> parts[] = {{dq.data() + bt * QC, 0, sh.NH},
                                                             {dk.data() + bt * KC, QC, sh.KVH}};
      for (const auto& [dx, off, heads] : parts)
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t i = 0; i < H; ++i) {
            const Rot r = rotation(t, i, sh.HS);
            const double lo = gy[off + h * sh.HS + i], hi = gy[off + h * sh.HS + i + H];
            dx[h * sh.HS + i] += r.m[0][0] * lo + r.m[1][0] * hi;
            dx[h * sh.HS + i + H] += r.m[0][1] * lo + r.m[1][1] * hi;
          }
    }
}

// fp32: within 1e-5 of the largest |want|. bf16: within one ulp of the rounded reference, or 1e-6 of
// the largest |want|.
using remat::test::expect_close;  // fp32; the bf16 overload below
void expect_close(const std::vector<bf16>& got, const std::vector<double>& want, const std::string& what) {
  expect_within_1ulp(got, std::vector<float>(want.begin(), want.end()), what, 1e-6);
}

template <class S>
void forward_matches_reference() {
  for (const auto& sh : kShapes) {
    const Case<S> c(sh, 1);
    std::vector<S> qkv(c.n3());
    c.forward(qkv);
    const std::string at = ", HS=" + std::to_string(sh.HS);
    expect_close(qkv, reference_forward(sh, widen(c.q), widen(c.k), widen(c.v)), "qkv" + at);
    // The v part is a copy: identical bits.
    const int64_t QC = sh.QC(), KC = sh.KC(), C3 = sh.C3();
    for (int64_t bt = 0; bt < sh.B * sh.T; ++bt)
      ASSERT_EQ(std::memcmp(qkv.data() + bt * C3 + QC + KC, c.v.data() + bt * KC, size_t(KC) * sizeof(S)), 0)
          << "v" << at << " token " << bt;
  }
}

template <class S>
void backward_matches_reference() {
  for (const auto& sh : kShapes) {
    const Case<S> c(sh, 4);
    auto dq = c.dq0, dk = c.dk0, dv = c.dv0;
    c.backward(dq, dk, dv);
    const auto dq0 = widen(c.dq0), dk0 = widen(c.dk0), dv0 = widen(c.dv0), g = widen(c.g);
    std::vector<double> rq(dq0.begin(), dq0.end()), rk(dk0.begin(), dk0.end());
    reference_backward(sh, g, rq, rk);
    const std::string at = ", HS=" + std::to_string(sh.HS);
    expect_close(dq, rq, "dq" + at);
    expect_close(dk, rk, "dk" + at);
    // dv: dv0 + the v part of g, one fp32 add, rounded once to S.
    const int64_t QC = sh.QC(), KC = sh.KC(), C3 = sh.C3();
    std::vector<float> rv(dv0.size());
    for (int64_t bt = 0; bt < sh.B * sh.T; ++bt)
      for (int64_t j = 0; j < KC; ++j) rv[bt * KC + j] = dv0[bt * KC + j] + g[bt * C3 + QC + KC + j];
    if constexpr (std::is_same_v<S, bf16>)
      expect_bits_of_rounded(dv, rv, "dv" + at);
    else
      ASSERT_TRUE(same_bits(dv, rv)) << "dv" << at;
  }
}

}  // namespace

TEST(RopeBf16, ForwardMatchesDoubleReference) { forward_matches_reference<bf16>(); }
TEST(RopeBf16, BackwardMatchesDoubleReferenceAndAccumulates) { backward_matches_reference<bf16>(); }
// The fp32 instantiation, held to the same reference.
TEST(RopeBf16, Fp32ForwardMatchesDoubleReference) { forward_matches_reference<float>(); }
TEST(RopeBf16, Fp32BackwardMatchesDoubleReferenceAndAccumulates) { backward_matches_reference<float>(); }

TEST(RopeBf16, EmptyGradientsAreSkipped) {
  const Case<bf16> c(Shape{2, 5, 4, 2, 16}, 11);
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
  const Case<bf16> c(Shape{2, 9, 4, 2, 128}, 16);
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
