// Naive attention kernel, multi-head and grouped-query: against a double-precision reference,
// finite differences, += semantics, determinism across runs and thread counts, bit-identity with the
// pre-GQA kernel on the GPT-2 layout, and the vectorised dropout keep bits.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "attention_ref.h"
#include "golden.h"
#include "kernels/attention.h"
#include "kernels/attention_tile.h"  // dropout_keep_bits
#include "kernels/philox.h"

using namespace remat::kernels;
using namespace remat::test;

namespace {

constexpr uint64_t kSeed = 0x5eed1234abcdull, kOffset = 977;  // odd offset: unaligned philox groups

struct NaiveRun {
  std::vector<float> out, probs, dqkv;
};

// Forward then backward on `threads` OpenMP threads (workspace sized for exactly that many).
NaiveRun run_naive(const AttnDims& d, const std::vector<float>& qkv, const std::vector<float>& dout, float p,
                   float dqkv_init = 0.f, int threads = 2) {
  NaiveRun r;
  r.out.assign(d.out_size(), -7.f);
  r.probs.assign(d.B * d.NH * d.T * d.T, -7.f);
  r.dqkv.assign(d.qkv_size(), dqkv_init);
  std::vector<float> ws(attention_workspace_floats(d.B, d.T, d.NH, d.KVH, d.HS, threads), std::nanf(""));
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  attention_forward(r.out, r.probs, qkv, d.B, d.T, d.NH, d.KVH, d.HS, p, kSeed, kOffset, ws);
  attention_backward(r.dqkv, dout, qkv, r.probs, d.B, d.T, d.NH, d.KVH, d.HS, p, kSeed, kOffset, ws);
  omp_set_num_threads(saved);
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST(DropoutKeepBits, MatchesScalarDropoutKeep) {
  std::vector<uint64_t> w(8);
  for (float p : {0.f, 0.1f, 0.3f, 0.5f, 0.999f})
    for (uint64_t start : {0ull, 1ull, 2ull, 3ull, 61ull, 1000003ull, (1ull << 32) - 5})
      for (int64_t n : {1, 3, 63, 64, 65, 129, 200, 256}) {
        std::fill(w.begin(), w.end(), ~0ull);
        dropout_keep_bits(w.data(), 42, start, n, p);
        for (int64_t k = 0; k < n; ++k)
          ASSERT_EQ(bool((w[k / 64] >> (k % 64)) & 1), dropout_keep(42, start + k, p))
              << "p=" << p << " start=" << start << " n=" << n << " k=" << k;
        if (n % 64) {
          EXPECT_EQ(w[(n - 1) / 64] >> (n % 64), 0u);
        }
      }
}

// T, HS, NH, KVH, p.
class NaiveVsRef : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, int64_t, int64_t, float>> {};

// Forward out/probs and backward dqkv against the double reference; error = max|a-b| / max|ref|,
// for dqkv also separately over the dQ, dK and dV parts.
TEST_P(NaiveVsRef, ForwardAndBackward) {
  auto [T, HS, NH, KVH, p] = GetParam();
  const AttnDims d{2, T, NH, KVH, HS};
  auto qkv = random_vec(d.qkv_size(), 1, -2.f, 2.f);
  auto dout = random_vec(d.out_size(), 2);
  NaiveRun r = run_naive(d, qkv, dout, p);
  std::vector<double> out, probs, dqkv;
  ref_forward(d, to_double(qkv), p, kSeed, kOffset, out, &probs);
  ref_backward(d, to_double(qkv), to_double(dout), p, kSeed, kOffset, dqkv);
  EXPECT_LT(max_rel_err(r.out, out), 1e-5);
  EXPECT_LT(max_rel_err(r.probs, probs), 1e-5);
  EXPECT_LT(max_rel_err(r.dqkv, dqkv), 1e-5);
  for (int part = 0; part < 3; ++part) EXPECT_LT(part_rel_err(d, r.dqkv, dqkv, part), 1e-5) << "part " << part;
  for (int64_t bh = 0; bh < d.B * d.NH; ++bh)
    for (int64_t i = 0; i < T; ++i) {
      double s = 0;
      for (int64_t j = 0; j < T; ++j) {
        const float v = r.probs[(bh * T + i) * T + j];
        if (j > i) {
          ASSERT_EQ(v, 0.f) << "upper triangle must be written as 0";
        }
        s += v;
      }
      ASSERT_NEAR(s, 1.0, 1e-5);
    }
}

// T crosses the 16-query groups (17, 100) and the 64-query tiles (65, 129, 130, 300) with partial
// last groups and tiles; HS = 1, 4, 12, 20, 24, 80 are not multiples of 16 (masked vector tails),
// HS = 128 spans two 64-column chunks of the micro-kernel. KVH = NH (multi-head), NH/2 and 1 (grouped).
INSTANTIATE_TEST_SUITE_P(Shapes, NaiveVsRef,
                         ::testing::Values(std::make_tuple(5, 4, 2, 2, 0.f), std::make_tuple(5, 4, 2, 2, 0.3f),
                                           std::make_tuple(1, 16, 3, 3, 0.f), std::make_tuple(17, 20, 2, 2, 0.1f),
                                           std::make_tuple(65, 64, 1, 1, 0.f), std::make_tuple(100, 24, 2, 2, 0.f),
                                           std::make_tuple(129, 64, 1, 1, 0.2f), std::make_tuple(130, 16, 3, 3, 0.1f),
                                           std::make_tuple(300, 80, 1, 1, 0.f), std::make_tuple(300, 64, 2, 2, 0.2f)));

INSTANTIATE_TEST_SUITE_P(Gqa, NaiveVsRef,
                         ::testing::Values(std::make_tuple(5, 4, 4, 2, 0.3f), std::make_tuple(17, 12, 4, 1, 0.1f),
                                           std::make_tuple(33, 1, 2, 1, 0.f), std::make_tuple(65, 64, 4, 2, 0.f),
                                           std::make_tuple(100, 24, 6, 3, 0.f), std::make_tuple(70, 128, 2, 1, 0.1f),
                                           std::make_tuple(129, 64, 2, 1, 0.2f), std::make_tuple(130, 16, 4, 1, 0.1f),
                                           std::make_tuple(200, 12, 6, 2, 0.f), std::make_tuple(300, 64, 4, 2, 0.2f)));

// Finite differences on the double reference forward vs the float analytic backward, separately for
// the dQ, dK and dV parts of dqkv (so a zeroed or negated dK or dV fails even when dQ is right).
// loss = sum(out * W); the dropout mask is a pure function of (seed, offset) so loss is smooth in qkv.
// p, NH, KVH, HS.
class NaiveGradCheck : public ::testing::TestWithParam<std::tuple<float, int64_t, int64_t, int64_t>> {};

TEST_P(NaiveGradCheck, FiniteDifferences) {
  const auto [p, NH, KVH, HS] = GetParam();
  const AttnDims d{2, 5, NH, KVH, HS};
  auto qkv = random_vec(d.qkv_size(), 3);
  auto W = random_vec(d.out_size(), 4);
  NaiveRun r = run_naive(d, qkv, W, p);
  auto loss = [&](const std::vector<double>& x) {
    std::vector<double> out;
    ref_forward(d, x, p, kSeed, kOffset, out);
    double s = 0;
    for (size_t i = 0; i < out.size(); ++i) s += out[i] * W[i];
    return s;
  };
  std::vector<double> x = to_double(qkv), fd(x.size());
  const double eps = 1e-6;
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + eps;
    const double lp = loss(x);
    x[i] = x0 - eps;
    const double lm = loss(x);
    x[i] = x0;
    fd[i] = (lp - lm) / (2 * eps);
  }
  EXPECT_LT(max_rel_err(r.dqkv, fd), 1e-5);
  std::vector<float> neg(r.dqkv.size()), zero(r.dqkv.size(), 0.f);
  for (size_t i = 0; i < neg.size(); ++i) neg[i] = -r.dqkv[i];
  for (int part = 0; part < 3; ++part) {
    EXPECT_LT(part_rel_err(d, r.dqkv, fd, part), 1e-5) << "part " << part;
    EXPECT_GT(part_max_abs(d, fd, part), 1e-2) << "part " << part << ": the check must not be vacuous";
    // The metric itself rejects a zero or negated gradient of that part.
    EXPECT_GT(part_rel_err(d, neg, fd, part), 1.0) << "part " << part;
    EXPECT_GE(part_rel_err(d, zero, fd, part), 1.0) << "part " << part;
  }
}

INSTANTIATE_TEST_SUITE_P(Heads, NaiveGradCheck,
                         ::testing::Values(std::make_tuple(0.f, 2, 2, 4), std::make_tuple(0.3f, 2, 2, 4),
                                           std::make_tuple(0.f, 4, 2, 3), std::make_tuple(0.3f, 4, 2, 3),
                                           std::make_tuple(0.f, 4, 1, 4), std::make_tuple(0.3f, 4, 1, 4)));

TEST(NaiveAttention, BackwardAddsIntoDqkv) {
  for (int64_t KVH : {3, 1}) {
    const AttnDims d{2, 70, 3, KVH, 16};
    auto qkv = random_vec(d.qkv_size(), 5);
    auto dout = random_vec(d.out_size(), 6);
    NaiveRun zero = run_naive(d, qkv, dout, 0.1f, 0.f);
    NaiveRun pre = run_naive(d, qkv, dout, 0.1f, 0.75f);
    // The kernel accumulates straight into dqkv (one running sum per element), so the initial value
    // changes the rounding: compare to within a few ulps of the magnitudes involved.
    for (size_t i = 0; i < zero.dqkv.size(); ++i) ASSERT_NEAR(pre.dqkv[i], zero.dqkv[i] + 0.75f, 1e-5) << KVH;
  }
}

// Bit-identical run to run and on 1, 2 or 3 threads (3 > cores is fine: OpenMP oversubscribes),
// multi-head and grouped (dK, dV of a kv head summed over its query heads).
TEST(NaiveAttention, DeterministicAcrossRunsAndThreadCounts) {
  for (int64_t KVH : {6, 3, 1}) {
    const AttnDims d{2, 200, 6, KVH, 40};  // HS = 40 not a multiple of 16
    auto qkv = random_vec(d.qkv_size(), 7);
    auto dout = random_vec(d.out_size(), 8);
    NaiveRun a = run_naive(d, qkv, dout, 0.1f, 0.f, 2), b = run_naive(d, qkv, dout, 0.1f, 0.f, 2);
    NaiveRun c = run_naive(d, qkv, dout, 0.1f, 0.f, 1), e = run_naive(d, qkv, dout, 0.1f, 0.f, 3);
    for (const NaiveRun* o : {&b, &c, &e}) {
      EXPECT_TRUE(same_bits(a.out, o->out)) << "KVH=" << KVH;
      EXPECT_TRUE(same_bits(a.probs, o->probs)) << "KVH=" << KVH;
      EXPECT_TRUE(same_bits(a.dqkv, o->dqkv)) << "KVH=" << KVH;
    }
  }
}

// The workspace caps the thread count: one thread's worth runs on one thread, same bits.
TEST(NaiveAttention, WorkspaceForOneThreadGivesSameResult) {
  const AttnDims d{2, 90, 4, 2, 24};
  auto qkv = random_vec(d.qkv_size(), 9);
  auto dout = random_vec(d.out_size(), 10);
  NaiveRun a = run_naive(d, qkv, dout, 0.1f);
  NaiveRun c;
  c.out.assign(d.out_size(), 0.f);
  c.probs.assign(d.B * d.NH * d.T * d.T, 0.f);
  c.dqkv.assign(d.qkv_size(), 0.f);
  std::vector<float> ws(attention_workspace_floats(d.B, d.T, d.NH, d.KVH, d.HS, 1));
  attention_forward(c.out, c.probs, qkv, d.B, d.T, d.NH, d.KVH, d.HS, 0.1f, kSeed, kOffset, ws);
  attention_backward(c.dqkv, dout, qkv, c.probs, d.B, d.T, d.NH, d.KVH, d.HS, 0.1f, kSeed, kOffset, ws);
  EXPECT_TRUE(same_bits(a.out, c.out));
  EXPECT_TRUE(same_bits(a.dqkv, c.dqkv));
}

// GQA is MHA with each kv head repeated NH/KVH times (Hugging Face repeat_kv): the forward and dQ
// are bit-identical to the repeated-kv MHA run; dK, dV are the sums over the repeats.
TEST(NaiveAttention, GqaMatchesRepeatedKvMha) {
  for (int64_t KVH : {2, 1}) {
    const AttnDims g{2, 77, 4, KVH, 24}, m{2, 77, 4, 4, 24};
    auto qkv = random_vec(g.qkv_size(), 11, -2.f, 2.f);
    auto dout = random_vec(g.out_size(), 12);
    std::vector<float> rep(m.qkv_size());
    for (int64_t r = 0; r < g.B * g.T; ++r)
      for (int64_t h = 0; h < g.NH; ++h)
        for (int64_t c = 0; c < g.HS; ++c) {
          const float* src = qkv.data() + r * g.C3();
          float* dst = rep.data() + r * m.C3();
          dst[m.q_off(h) + c] = src[g.q_off(h) + c];
          dst[m.k_off(h) + c] = src[g.k_off(g.kv(h)) + c];
          dst[m.v_off(h) + c] = src[g.v_off(g.kv(h)) + c];
        }
    for (float p : {0.f, 0.2f}) {
      NaiveRun a = run_naive(g, qkv, dout, p), b = run_naive(m, rep, dout, p);
      EXPECT_TRUE(same_bits(a.out, b.out));
      EXPECT_TRUE(same_bits(a.probs, b.probs));
      std::vector<float> summed(g.qkv_size(), 0.f);
      double maxq = 0;
      for (int64_t r = 0; r < g.B * g.T; ++r)
        for (int64_t h = 0; h < g.NH; ++h)
          for (int64_t c = 0; c < g.HS; ++c) {
            const float* s = b.dqkv.data() + r * m.C3();
            const float* a_row = a.dqkv.data() + r * g.C3();
            maxq = std::max(maxq, double(std::abs(a_row[g.q_off(h) + c] - s[m.q_off(h) + c])));
            summed[r * g.C3() + g.q_off(h) + c] = s[m.q_off(h) + c];
            summed[r * g.C3() + g.k_off(g.kv(h)) + c] += s[m.k_off(h) + c];
            summed[r * g.C3() + g.v_off(g.kv(h)) + c] += s[m.v_off(h) + c];
          }
      EXPECT_EQ(maxq, 0.0) << "dQ must be bit-identical";
      for (int part = 1; part < 3; ++part) EXPECT_LT(part_rel_err(g, a.dqkv, summed, part), 1e-5);
    }
  }
}

// The GPT-2 layout (KVH == NH) gives exactly the bits of the kernel before grouped-query attention
// was added: FNV-1a hashes of out, probs and dqkv recorded from that kernel (commit 3d8f325, GCC 12,
// -march=native with AVX-512). On AVX2 + FMA they were recorded from this kernel, as a guard of its
// bits; a build with neither checks that a second run gives the same bits (golden.h).
TEST(NaiveAttention, MhaBitIdenticalToPreGqaKernel) {
  const remat::test::AttentionCase cases[] = {
      {2, 100, 3, 24, 0.1f, {{"avx512, gcc 12", {0xd0c2afd02ae61130ull, 0x0703634a6fbae5bdull, 0xd7b2fc2e398cb9e2ull}},
                              {"avx2+fma, gcc 12", {0x7e6ca23e50d01811ull, 0x558cf0cd133c2bf0ull, 0x5219f30202f28c74ull}}}},
      {1, 130, 2, 64, 0.0f, {{"avx512, gcc 12", {0xdd9132aa15a1f3bfull, 0xb986d95737f11284ull, 0x73e53ec40af2c223ull}},
                              {"avx2+fma, gcc 12", {0x2497a37944ffc029ull, 0x6d2ff311163a3ca3ull, 0x59a619c42aaaff7eull}}}},
      {2, 67, 4, 16, 0.1f, {{"avx512, gcc 12", {0x0552dbd2a2561ff3ull, 0x5cf2014143843797ull, 0xc6ccddbaf2bb022bull}},
                              {"avx2+fma, gcc 12", {0x4a64c0d9c9af859aull, 0x7bebe4eeae292558ull, 0xf97041989fe015f9ull}}}},
  };
  for (const remat::test::AttentionCase& c : cases) {
    const AttnDims d{c.B, c.T, c.NH, c.NH, c.HS};
    auto qkv = random_vec(d.qkv_size(), 21, -2.f, 2.f), dout = random_vec(d.out_size(), 22);
    remat::test::pinned_or_repeatable(c.by_build, "T=" + std::to_string(c.T), [&] {
      NaiveRun r = run_naive(d, qkv, dout, c.p);
      return std::make_tuple(r.out, r.probs, r.dqkv);
    });
  }
}

TEST(NaiveAttention, DropoutChangesOutputAndSeedMatters) {
  const AttnDims d{1, 40, 2, 1, 8};
  auto qkv = random_vec(d.qkv_size(), 9);
  auto dout = random_vec(d.out_size(), 10);
  NaiveRun a = run_naive(d, qkv, dout, 0.f), b = run_naive(d, qkv, dout, 0.5f);
  EXPECT_GT(max_rel_err(b.out, a.out), 1e-2);
  EXPECT_EQ(0, std::memcmp(a.probs.data(), b.probs.data(), a.probs.size() * 4)) << "probs are pre-dropout";
}

TEST(NaiveAttentionDeathTest, RejectsKvHeadsNotDividingQueryHeads) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(attention_workspace_floats(1, 8, 6, 4, 16, 1), "multiple of KVH");
}
