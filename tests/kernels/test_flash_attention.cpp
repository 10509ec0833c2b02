// Flash attention against the naive kernel (out, dqkv), lse against a double log-sum-exp of the
// scores, determinism, += semantics, and workspace that does not grow with T^2.
// Error metric everywhere: max|flash - naive| / max|naive| (relative to the largest magnitude).
#include <gtest/gtest.h>
#include <omp.h>

#include <cstdio>
#include <cstring>

#include "attention_ref.h"
#include "kernels/attention.h"
#include "kernels/flash_attention.h"

using namespace remat::kernels;
using namespace remat::test;

namespace {

constexpr uint64_t kSeed = 0xfeedbeef1234ull, kOffset = 12345;

struct FlashRun {
  std::vector<float> out, lse, dqkv;
};

FlashRun run_flash(const AttnDims& d, const std::vector<float>& qkv, const std::vector<float>& dout, float p,
                   float dqkv_init = 0.f, int64_t ws_threads = 2) {
  FlashRun r;
  r.out.assign(d.B * d.T * d.C, -7.f);
  r.lse.assign(d.B * d.NH * d.T, -7.f);
  r.dqkv.assign(d.B * d.T * 3 * d.C, dqkv_init);
  std::vector<float> ws(flash_attention_workspace_floats(d.B, d.T, d.C, d.NH, ws_threads), std::nanf(""));
  flash_attention_forward(r.out, r.lse, qkv, d.B, d.T, d.C, d.NH, p, kSeed, kOffset, ws);
  flash_attention_backward(r.dqkv, dout, qkv, r.out, r.lse, d.B, d.T, d.C, d.NH, p, kSeed, kOffset, ws);
  return r;
}

}  // namespace

class FlashVsNaive : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, float>> {};

TEST_P(FlashVsNaive, OutDqkvLse) {
  auto [T, HS, p] = GetParam();
  const AttnDims d = T >= 1024 ? AttnDims{1, T, 2 * HS, 2} : AttnDims{2, T, 3 * HS, 3};
  auto qkv = random_vec(d.B * d.T * 3 * d.C, 11, -2.f, 2.f);
  auto dout = random_vec(d.B * d.T * d.C, 12);

  std::vector<float> out(d.B * d.T * d.C), probs(d.B * d.NH * d.T * d.T), dqkv(d.B * d.T * 3 * d.C, 0.f);
  std::vector<float> ws(attention_workspace_floats(d.B, d.T, d.C, d.NH, 2));
  attention_forward(out, probs, qkv, d.B, d.T, d.C, d.NH, p, kSeed, kOffset, ws);
  attention_backward(dqkv, dout, qkv, probs, d.B, d.T, d.C, d.NH, p, kSeed, kOffset, ws);

  FlashRun f = run_flash(d, qkv, dout, p);
  const double e_out = max_rel_err(f.out, out), e_dqkv = max_rel_err(f.dqkv, dqkv);
  EXPECT_LT(e_out, 1e-5);
  EXPECT_LT(e_dqkv, 1e-5);

  // lse vs log-sum-exp of the scaled scores, in double.
  const auto q = to_double(qkv);
  double lse_err = 0;
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.NH; ++h)
      for (int64_t i = 0; i < T; ++i) {
        double mx = -1e300, s = 0;
        std::vector<double> sc(i + 1);
        for (int64_t j = 0; j <= i; ++j) mx = std::max(mx, sc[j] = ref_score(d, q, b, h, i, j));
        for (int64_t j = 0; j <= i; ++j) s += std::exp(sc[j] - mx);
        const double ref = mx + std::log(s);
        lse_err = std::max(lse_err, std::abs(f.lse[(b * d.NH + h) * T + i] - ref) / std::max(1.0, std::abs(ref)));
      }
  EXPECT_LT(lse_err, 1e-5);
  std::printf("  T=%ld HS=%ld p=%.1f  rel err: out %.2e  dqkv %.2e  lse %.2e\n", long(T), long(HS), p, e_out, e_dqkv,
              lse_err);
}

INSTANTIATE_TEST_SUITE_P(Shapes, FlashVsNaive,
                         ::testing::Combine(::testing::Values<int64_t>(1, 7, 64, 333, 1024),
                                            ::testing::Values<int64_t>(16, 64, 80), ::testing::Values(0.f, 0.1f)),
                         [](const auto& info) {
                           char name[64];
                           std::snprintf(name, sizeof name, "T%ld_HS%ld_%s", long(std::get<0>(info.param)),
                                         long(std::get<1>(info.param)), std::get<2>(info.param) > 0 ? "drop" : "nodrop");
                           return std::string(name);
                         });

TEST(FlashAttention, MatchesDoubleReferenceSmall) {
  const AttnDims d{2, 5, 8, 2};
  auto qkv = random_vec(d.B * d.T * 3 * d.C, 13);
  auto dout = random_vec(d.B * d.T * d.C, 14);
  for (float p : {0.f, 0.3f}) {
    FlashRun f = run_flash(d, qkv, dout, p);
    std::vector<double> out, lse, dqkv;
    ref_forward(d, to_double(qkv), p, kSeed, kOffset, out, nullptr, &lse);
    ref_backward(d, to_double(qkv), to_double(dout), p, kSeed, kOffset, dqkv);
    EXPECT_LT(max_rel_err(f.out, out), 1e-5);
    EXPECT_LT(max_rel_err(f.lse, lse), 1e-5);
    EXPECT_LT(max_rel_err(f.dqkv, dqkv), 1e-5);
  }
}

TEST(FlashAttention, DeterministicAcrossRunsAndThreadCounts) {
  const AttnDims d{2, 333, 240, 3};  // HS = 80
  auto qkv = random_vec(d.B * d.T * 3 * d.C, 15);
  auto dout = random_vec(d.B * d.T * d.C, 16);
  FlashRun a = run_flash(d, qkv, dout, 0.1f), b = run_flash(d, qkv, dout, 0.1f);
  // One thread's worth of workspace: the kernels drop to one thread; results must not change.
  FlashRun c = run_flash(d, qkv, dout, 0.1f, 0.f, 1);
  for (const FlashRun* o : {&b, &c}) {
    EXPECT_EQ(0, std::memcmp(a.out.data(), o->out.data(), a.out.size() * 4));
    EXPECT_EQ(0, std::memcmp(a.lse.data(), o->lse.data(), a.lse.size() * 4));
    EXPECT_EQ(0, std::memcmp(a.dqkv.data(), o->dqkv.data(), a.dqkv.size() * 4));
  }
}

TEST(FlashAttention, BackwardAddsIntoDqkv) {
  const AttnDims d{1, 150, 128, 2};
  auto qkv = random_vec(d.B * d.T * 3 * d.C, 17);
  auto dout = random_vec(d.B * d.T * d.C, 18);
  FlashRun zero = run_flash(d, qkv, dout, 0.f, 0.f), pre = run_flash(d, qkv, dout, 0.f, -1.25f);
  for (size_t i = 0; i < zero.dqkv.size(); ++i) ASSERT_NEAR(pre.dqkv[i], zero.dqkv[i] - 1.25f, 1e-5);
}

TEST(FlashAttention, WorkspaceDoesNotGrowWithT) {
  for (int64_t HS : {16, 64, 80}) {
    const int64_t C = 12 * HS;
    const int64_t w1k = flash_attention_workspace_floats(2, 1024, C, 12, 2);
    const int64_t w4k = flash_attention_workspace_floats(2, 4096, C, 12, 2);
    EXPECT_LE(w4k, 2 * w1k);
    EXPECT_EQ(w4k, flash_attention_workspace_floats(2, 64, C, 12, 2));
    // O(tile * (HS + tile)) per thread.
    EXPECT_LE(w4k, 2 * (4 * (kFlashBr + kFlashBc) * (HS + kFlashBc)));
    EXPECT_LT(w4k, attention_workspace_floats(2, 4096, C, 12, 2) / 10);  // the naive one is O(T * (HS + tile))
  }
}
