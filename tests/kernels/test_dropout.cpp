#include "kernels/dropout.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "fd_check.h"
#include "kernels/philox.h"

using namespace remat::kernels;
using namespace remat::test;

TEST(Dropout, KeepRateMatchesOneMinusP) {
  const int64_t N = 1000000;
  std::vector<float> x(N, 1.0f), out(N);
  for (float p : {0.1f, 0.5f, 0.9f}) {
    dropout_forward(out, x, N, p, 42, 7);
    int64_t kept = 0;
    for (float v : out) kept += v != 0.0f;
    EXPECT_NEAR(double(kept) / N, 1.0 - p, 0.005) << "p=" << p;
  }
}

TEST(Dropout, MaskMatchesPhiloxAndScales) {
  // Misaligned offsets and lengths exercise partial first/last Philox groups and batches.
  for (uint64_t offset : {0ull, 1ull, 3ull, 62ull, (1ull << 33) + 5}) {
    for (int64_t N : {1, 3, 4, 65, 1000}) {
      const float p = 0.3f, scale = 1.0f / (1.0f - p);
      auto x = randn(N, 1);
      std::vector<float> out(N);
      dropout_forward(out, x, N, p, 99, offset);
      for (int64_t i = 0; i < N; ++i) {
        const float expect = dropout_keep(99, offset + i, p) ? x[i] * scale : 0.0f;
        ASSERT_EQ(out[i], expect) << "offset=" << offset << " N=" << N << " i=" << i;
      }
    }
  }
}

TEST(Dropout, RegeneratedAndOffsetShiftedMasksAgree) {
  const int64_t N = 5000;
  const float p = 0.25f;
  std::vector<float> x(N, 1.0f), a(N), b(N);
  dropout_forward(a, x, N, p, 5, 1000);
  dropout_forward(b, x, N, p, 5, 1000);
  EXPECT_TRUE(bit_equal(a, b));
  // Element i of the call at offset o equals element i - k of a call at offset o + k.
  for (int64_t k : {1, 2, 3, 4, 63, 777}) {
    std::vector<float> s(N - k);
    dropout_forward(s, std::span<const float>(x).subspan(k), N - k, p, 5, 1000 + k);
    EXPECT_TRUE(bit_equal(s, std::span<const float>(a).subspan(k))) << "k=" << k;
  }
  // A different seed gives a different mask.
  dropout_forward(b, x, N, p, 6, 1000);
  EXPECT_FALSE(bit_equal(a, b));
}

TEST(Dropout, PZeroIsIdentityPOneIsZero) {
  const int64_t N = 333;
  auto x = randn(N, 2);
  std::vector<float> out(N), dx(N, 1.0f);
  dropout_forward(out, x, N, 0.0f, 1, 0);
  EXPECT_TRUE(bit_equal(out, x));
  dropout_backward(dx, x, N, 0.0f, 1, 0);
  for (int64_t i = 0; i < N; ++i) ASSERT_EQ(dx[i], 1.0f + x[i]);
  dropout_forward(out, x, N, 1.0f, 1, 0);
  for (float v : out) ASSERT_EQ(v, 0.0f);
}

TEST(Dropout, BackwardUsesSameMaskAndAccumulates) {
  const int64_t N = 2049;
  const float p = 0.4f;
  auto d = randn(N, 3);
  std::vector<float> mask_probe(N, 1.0f), fwd(N), dx(N, 2.0f);
  dropout_forward(fwd, mask_probe, N, p, 11, 13);
  dropout_backward(dx, d, N, p, 11, 13);
  for (int64_t i = 0; i < N; ++i)
    ASSERT_EQ(dx[i], fwd[i] != 0.0f ? std::fma(d[i], 1.0f / (1.0f - p), 2.0f) : 2.0f) << i;
  // A sub-range call (offset shifted, so batch edges move) gives the same gradient bits.
  for (int64_t k : {1, 5, 64, 333}) {
    std::vector<float> sub(N - k, 2.0f);
    dropout_backward(sub, std::span<const float>(d).subspan(k), N - k, p, 11, 13 + k);
    EXPECT_TRUE(bit_equal(sub, std::span<const float>(dx).subspan(k))) << "k=" << k;
  }
}

TEST(Dropout, GradientFiniteDifference) {
  const int64_t N = 150;
  auto x = randn(N, 4);
  std::vector<float> dx(N);
  fd_check(
      N, [&](std::span<float> out) { dropout_forward(out, x, N, 0.3f, 21, 3); },
      [&](std::span<const float> dout) { dropout_backward(dx, dout, N, 0.3f, 21, 3); }, {{"inp", &x, &dx}});
}

TEST(Dropout, IndependentOfThreadCount) {
  const int64_t N = 100003;
  auto x = randn(N, 5);
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    std::vector<float> out(N);
    dropout_forward(out, x, N, 0.1f, 77, 9);
    omp_set_num_threads(2);
    return out;
  };
  const auto r1 = run(2), r2 = run(2), r3 = run(1);
  EXPECT_TRUE(bit_equal(r1, r2));
  EXPECT_TRUE(bit_equal(r1, r3));
}
