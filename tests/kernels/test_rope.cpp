#include "kernels/rope.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "fd_check.h"
#include "rope_case.h"

using namespace remat::kernels;
using namespace remat::test;

namespace {

using Shape = RopeShape;
// MHA, GQA (NH = 4, KVH = 2 and 1), an odd half-head (HS/2 = 5), B = T = 1, and a LLaMA-sized head.
const Shape kShapes[] = {{2, 5, 2, 2, 8}, {2, 7, 4, 2, 16}, {1, 6, 4, 1, 10}, {1, 1, 3, 1, 6}, {2, 9, 4, 2, 64}};

// Reference rotation in double, from angles computed independently of the table.
double angle(int64_t t, int64_t i, int64_t HS, double theta) { return double(t) / std::pow(theta, 2.0 * i / HS); }

}  // namespace

TEST(Rope, TableMatchesDoubleAngles) {
  for (float theta : {10000.0f, 500000.0f}) {
    const int64_t T = 4096, HS = 128, H = HS / 2;
    auto tb = rope_tables(T, HS, theta);
    for (int64_t t = 0; t < T; t += 37)
      for (int64_t i = 0; i < H; ++i) {
        const double a = angle(t, i, HS, theta);
        // Within a float ulp (the two double angles may differ in the last bit, and a rounding
        // boundary can fall between them).
        ASSERT_NEAR(tb.cos[t * H + i], std::cos(a), 6e-8) << "t=" << t << " i=" << i;
        ASSERT_NEAR(tb.sin[t * H + i], std::sin(a), 6e-8) << "t=" << t << " i=" << i;
      }
    // Row 0 is the identity rotation; element i = 0 rotates by t radians.
    for (int64_t i = 0; i < H; ++i) EXPECT_TRUE(tb.cos[i] == 1.0f && tb.sin[i] == 0.0f);
    EXPECT_EQ(tb.sin[1 * H + 0], float(std::sin(1.0)));
  }
  // A table for maxT rows starts with the table for T rows.
  auto small = rope_tables(10, 16), big = rope_tables(50, 16);
  EXPECT_TRUE(bit_equal(small.cos, std::span<const float>(big.cos).first(small.cos.size())));
  EXPECT_TRUE(bit_equal(small.sin, std::span<const float>(big.sin).first(small.sin.size())));
}

TEST(Rope, ForwardMatchesDoubleReference) {
  for (const auto& [B, T, NH, KVH, HS] : kShapes) {
    const int64_t H = HS / 2, QC = NH * HS, KC = KVH * HS, C3 = QC + 2 * KC;
    auto q = randn(B * T * QC, 1), k = randn(B * T * KC, 2), v = randn(B * T * KC, 3);
    auto tb = rope_tables(T, HS);
    std::vector<float> qkv(B * T * C3, std::nanf(""));
    rope_qkv_forward<float>(qkv, q, k, v, tb.cos, tb.sin, B, T, NH, KVH, HS);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t bt = b * T + t;
        auto check_head = [&](const float* x, const float* y, const char* what) {
          for (int64_t i = 0; i < H; ++i) {
            const double a = angle(t, i, HS, 10000.0), c = std::cos(a), s = std::sin(a);
            const double r0 = x[i] * c - x[i + H] * s, r1 = x[i + H] * c + x[i] * s;
            ASSERT_NEAR(y[i], r0, 1e-6 * (1 + std::fabs(r0))) << what << " t=" << t << " i=" << i;
            ASSERT_NEAR(y[i + H], r1, 1e-6 * (1 + std::fabs(r1))) << what << " t=" << t << " i=" << i;
          }
        };
        for (int64_t h = 0; h < NH; ++h) check_head(&q[bt * QC + h * HS], &qkv[bt * C3 + h * HS], "q");
        for (int64_t h = 0; h < KVH; ++h) check_head(&k[bt * KC + h * HS], &qkv[bt * C3 + QC + h * HS], "k");
        // v is copied exactly.
        EXPECT_TRUE(bit_equal(std::span<const float>(v).subspan(bt * KC, KC),
                              std::span<const float>(qkv).subspan(bt * C3 + QC + KC, KC)));
      }
  }
}

TEST(Rope, PreservesPairNormsAndPositionZeroIsIdentity) {
  for (const auto& [B, T, NH, KVH, HS] : kShapes) {
    const int64_t H = HS / 2, QC = NH * HS, KC = KVH * HS, C3 = QC + 2 * KC;
    auto q = randn(B * T * QC, 4), k = randn(B * T * KC, 5), v = randn(B * T * KC, 6);
    auto tb = rope_tables(T, HS);
    std::vector<float> qkv(B * T * C3);
    rope_qkv_forward<float>(qkv, q, k, v, tb.cos, tb.sin, B, T, NH, KVH, HS);
    for (int64_t bt = 0; bt < B * T; ++bt) {
      const int64_t t = bt % T;
      auto check = [&](const float* x, const float* y) {
        for (int64_t i = 0; i < H; ++i) {
          const double n0 = double(x[i]) * x[i] + double(x[i + H]) * x[i + H];
          const double n1 = double(y[i]) * y[i] + double(y[i + H]) * y[i + H];
          ASSERT_NEAR(n1, n0, 1e-6 * (1 + n0)) << "t=" << t << " i=" << i;
          if (t == 0) {
            ASSERT_TRUE(x[i] == y[i] && x[i + H] == y[i + H]) << "t=0 must be the identity";
          }
        }
      };
      for (int64_t h = 0; h < NH; ++h) check(&q[bt * QC + h * HS], &qkv[bt * C3 + h * HS]);
      for (int64_t h = 0; h < KVH; ++h) check(&k[bt * KC + h * HS], &qkv[bt * C3 + QC + h * HS]);
    }
  }
}

TEST(Rope, BackwardOfForwardIsTheInverseRotation) {
  for (const auto& [B, T, NH, KVH, HS] : kShapes) {
    const int64_t QC = NH * HS, KC = KVH * HS, C3 = QC + 2 * KC;
    auto q = randn(B * T * QC, 7), k = randn(B * T * KC, 8), v = randn(B * T * KC, 9);
    auto tb = rope_tables(T, HS);
    std::vector<float> qkv(B * T * C3), dq(B * T * QC, 0.0f), dk(B * T * KC, 0.0f), dv(B * T * KC, 0.0f);
    rope_qkv_forward<float>(qkv, q, k, v, tb.cos, tb.sin, B, T, NH, KVH, HS);
    // R orthogonal: R^T (R x) = x.
    rope_qkv_backward<float>(dq, dk, dv, qkv, tb.cos, tb.sin, B, T, NH, KVH, HS);
    for (size_t i = 0; i < q.size(); ++i) ASSERT_NEAR(dq[i], q[i], 1e-6 * (1 + std::fabs(q[i]))) << i;
    for (size_t i = 0; i < k.size(); ++i) ASSERT_NEAR(dk[i], k[i], 1e-6 * (1 + std::fabs(k[i]))) << i;
    EXPECT_TRUE(bit_equal(dv, v));  // 0 + v
  }
}

TEST(Rope, GradientsFiniteDifference) {
  for (const auto& [B, T, NH, KVH, HS] : {Shape{2, 3, 4, 2, 6}, Shape{1, 4, 4, 1, 8}}) {
    const int64_t QC = NH * HS, KC = KVH * HS, C3 = QC + 2 * KC;
    auto q = randn(B * T * QC, 10), k = randn(B * T * KC, 11), v = randn(B * T * KC, 12);
    auto tb = rope_tables(T, HS, 3.0f);  // small theta: large angles in every pair, even at T = 4
    std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
    fd_check(
        B * T * C3,
        [&](std::span<float> out) { rope_qkv_forward<float>(out, q, k, v, tb.cos, tb.sin, B, T, NH, KVH, HS); },
        [&](std::span<const float> dout) { rope_qkv_backward<float>(dq, dk, dv, dout, tb.cos, tb.sin, B, T, NH, KVH, HS); },
        {{"q", &q, &dq}, {"k", &k, &dk}, {"v", &v, &dv}});
  }
}

TEST(Rope, EmptyGradientsAreSkipped) {
  const int64_t B = 2, T = 5, NH = 4, KVH = 2, HS = 16, QC = NH * HS, KC = KVH * HS, C3 = QC + 2 * KC;
  auto tb = rope_tables(T, HS);
  auto dqkv = randn(B * T * C3, 13);
  const auto q0 = randn(B * T * QC, 14), k0 = randn(B * T * KC, 15), v0 = randn(B * T * KC, 16);
  auto dq = q0, dk = k0, dv = v0;
  rope_qkv_backward<float>(dq, dk, dv, dqkv, tb.cos, tb.sin, B, T, NH, KVH, HS);
  // Each gradient alone gives the same bits as all three together.
  auto dq1 = q0;
  rope_qkv_backward<float>(dq1, {}, {}, dqkv, tb.cos, tb.sin, B, T, NH, KVH, HS);
  auto dk1 = k0;
  rope_qkv_backward<float>({}, dk1, {}, dqkv, tb.cos, tb.sin, B, T, NH, KVH, HS);
  auto dv1 = v0;
  rope_qkv_backward<float>({}, {}, dv1, dqkv, tb.cos, tb.sin, B, T, NH, KVH, HS);
  EXPECT_TRUE(bit_equal(dq, dq1));
  EXPECT_TRUE(bit_equal(dk, dk1));
  EXPECT_TRUE(bit_equal(dv, dv1));
  EXPECT_FALSE(bit_equal(dq, q0));  // and it did add something
  rope_qkv_backward<float>({}, {}, {}, dqkv, tb.cos, tb.sin, B, T, NH, KVH, HS);  // nothing to do: fine
}

TEST(Rope, DeterministicAndThreadCountIndependent) {
  const int64_t B = 3, T = 37, NH = 4, KVH = 2, HS = 64, QC = NH * HS, KC = KVH * HS, C3 = QC + 2 * KC;
  auto q = randn(B * T * QC, 17), k = randn(B * T * KC, 18), v = randn(B * T * KC, 19);
  auto dqkv = randn(B * T * C3, 20);
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    std::vector<float> cos(T * HS / 2), sin(T * HS / 2), qkv(B * T * C3);
    std::vector<float> dq(q.size(), 1.0f), dk(k.size(), 1.0f), dv(v.size(), 1.0f);
    rope_table(cos, sin, T, HS, 10000.0f);
    rope_qkv_forward<float>(qkv, q, k, v, cos, sin, B, T, NH, KVH, HS);
    rope_qkv_backward<float>(dq, dk, dv, dqkv, cos, sin, B, T, NH, KVH, HS);
    omp_set_num_threads(2);
    std::vector<float> all = qkv;
    for (auto* x : {&cos, &sin, &dq, &dk, &dv}) all.insert(all.end(), x->begin(), x->end());
    return all;
  };
  const auto r1 = run(2), r2 = run(2), r3 = run(1);
  EXPECT_TRUE(bit_equal(r1, r2));
  EXPECT_TRUE(bit_equal(r1, r3));
}

TEST(RopeDeathTest, OddHeadSizeIsRejected) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the OpenMP pool of earlier tests may be alive
  std::vector<float> cos(10), sin(10);
  EXPECT_DEATH(rope_table(cos, sin, 2, 5, 10000.0f), "HS must be even");
  std::vector<float> q(5), k(5), v(5), qkv(15);
  EXPECT_DEATH(rope_qkv_forward<float>(qkv, q, k, v, cos, sin, 1, 1, 1, 1, 5), "HS must be even");
  EXPECT_DEATH(rope_qkv_backward<float>(q, k, v, qkv, cos, sin, 1, 1, 1, 1, 5), "HS must be even");
}
