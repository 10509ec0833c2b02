// bf16 dropout (dropout_bf16.h) against its fp32 twin (dropout.h): for the same (seed, offset) it must
// keep and drop the same positions (so a bf16 replay, or an fp32 run, reproduces the mask), and since
// x * scale and the backward's fma are single fp32 operations, its outputs are exactly the twin's
// rounded to bf16. The twin's gradient is finite-difference checked in test_dropout.cpp; being
// bit-equal to it, a zero, negated or non-accumulating gradient here fails.
#include <gtest/gtest.h>
#include <omp.h>

#include <vector>

#include "bf16_twin.h"
#include "fd_check.h"
#include "kernels/dropout.h"
#include "kernels/dropout_bf16.h"
#include "kernels/philox.h"

using namespace remat::kernels;
using namespace remat::test;

namespace {

std::vector<bf16> nonzero_input(int64_t N, uint64_t seed) {  // no zero: a zero output then means dropped
  auto x = randn(N, seed);
  for (auto& v : x)
    if (round_bf16(v) == 0.0f) v = 1.0f;
  return b16(x);
}

}  // namespace

TEST(DropoutBf16, SameMaskAndValuesAsFp32Twin) {
  // Offsets not multiples of 4 and lengths over several of the kernel's 8192-element slabs, ragged,
  // exercise partial Philox groups and batches at both ends of every slab.
  for (uint64_t offset : {0ull, 1ull, 3ull, 1022ull, (1ull << 33) + 5}) {
    for (int64_t N : {1, 5, 1024, 20000}) {
      for (float p : {0.1f, 0.5f, 0.9f}) {
        const auto x = nonzero_input(N, 1);
        std::vector<bf16> out(N);
        dropout_bf16_forward(out, x, N, p, 99, offset);
        std::vector<float> ref(N);
        dropout_forward(ref, f32(x), N, p, 99, offset);
        int64_t kept = 0;
        for (int64_t i = 0; i < N; ++i) {
          ASSERT_EQ(out[i].bits != 0, ref[i] != 0.0f) << "kept/dropped differs at " << i << " offset=" << offset;
          ASSERT_EQ(out[i].bits != 0, dropout_keep(99, offset + i, p)) << i;
          kept += out[i].bits != 0;
        }
        expect_bits_of_rounded(out, ref, "dropout forward");
        if (N == 20000) {
          EXPECT_NEAR(double(kept) / N, 1.0 - p, 0.03) << "p=" << p;
        }
      }
    }
  }
}

TEST(DropoutBf16, ReplayAndOffsetShiftedCallsAgree) {
  const int64_t N = 20000;
  const float p = 0.25f;
  const auto x = nonzero_input(N, 2);
  std::vector<bf16> a(N), b(N);
  dropout_bf16_forward(a, x, N, p, 5, 1000);
  dropout_bf16_forward(b, x, N, p, 5, 1000);
  expect_bits_of_rounded(b, f32(a), "replay");
  // Element i of the call at offset o equals element i - k of a call at offset o + k.
  for (int64_t k : {1, 3, 4, 1023, 8193}) {
    std::vector<bf16> s(N - k);
    dropout_bf16_forward(s, std::span<const bf16>(x).subspan(k), N - k, p, 5, 1000 + k);
    for (int64_t i = 0; i < N - k; ++i) ASSERT_EQ(s[i].bits, a[i + k].bits) << "k=" << k << " i=" << i;
  }
  // In place (out aliasing inp) gives the same bits.
  auto y = x;
  dropout_bf16_forward(y, y, N, p, 5, 1000);
  expect_bits_of_rounded(y, f32(a), "in place");
  // Another seed, another mask.
  dropout_bf16_forward(b, x, N, p, 6, 1000);
  int64_t differ = 0;
  for (int64_t i = 0; i < N; ++i) differ += (a[i].bits == 0) != (b[i].bits == 0);
  EXPECT_GT(differ, N / 10);
}

TEST(DropoutBf16, BackwardIsTheFp32TwinRounded) {
  const int64_t N = 20000;
  for (uint64_t offset : {0ull, 7ull}) {
    for (float p : {0.0f, 0.1f, 0.5f, 1.0f}) {
      const auto d = b16(randn(N, 3)), dx0 = b16(randn(N, 4));  // dinp pre-filled: the kernel must add
      auto dx = dx0;
      dropout_bf16_backward(dx, d, N, p, 11, offset);
      auto ref = f32(dx0);
      dropout_backward(ref, f32(d), N, p, 11, offset);
      expect_bits_of_rounded(dx, ref, "dropout backward, p=" + std::to_string(p));
      // The mask is the forward's: exactly the kept positions received a gradient.
      // (Into a zero gradient, from a dout with no zero, so a kept position is exactly a nonzero one.)
      if (p > 0.0f && p < 1.0f) {
        const auto ones = b16(std::vector<float>(N, 1.0f)), dn = nonzero_input(N, 3);
        std::vector<bf16> out(N), g(N);
        dropout_bf16_forward(out, ones, N, p, 11, offset);
        dropout_bf16_backward(g, dn, N, p, 11, offset);
        for (int64_t i = 0; i < N; ++i) ASSERT_EQ(g[i].bits != 0, out[i].bits != 0) << i;
      }
    }
  }
}

TEST(DropoutBf16, PZeroIsIdentityPOneIsZero) {
  const int64_t N = 3000;
  const auto x = nonzero_input(N, 5);
  std::vector<bf16> out(N);
  dropout_bf16_forward(out, x, N, 0.0f, 1, 0);
  expect_bits_of_rounded(out, f32(x), "p = 0");
  dropout_bf16_forward(out, x, N, 1.0f, 1, 0);
  for (int64_t i = 0; i < N; ++i) ASSERT_EQ(out[i].bits, 0) << i;
}

TEST(DropoutBf16, IndependentOfThreadCount) {
  const int64_t N = 50000;
  const auto x = nonzero_input(N, 6), d = b16(randn(N, 7));
  auto run = [&](int threads) {
    const int nt = omp_get_max_threads();
    omp_set_num_threads(threads);
    std::vector<bf16> out(N), dx(N);
    dropout_bf16_forward(out, x, N, 0.3f, 8, 3);
    dropout_bf16_backward(dx, d, N, 0.3f, 8, 3);
    omp_set_num_threads(nt);
    return std::pair{f32(out), f32(dx)};
  };
  const auto [o1, g1] = run(1);
  const auto [o2, g2] = run(2);
  EXPECT_TRUE(bit_equal(o1, o2) && bit_equal(g1, g2));
}
