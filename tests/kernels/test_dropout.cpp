#include "kernels/dropout.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <random>
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

// --- Philox4x32-10 known answers -------------------------------------------------------------------
//
// Random123's published known-answer vectors for philox4x32_10 (kat_vectors in DEShawResearch/
// random123), in its layout: counter words {c0, c1, c2, c3}, key words {k0, k1}, outputs {o0..o3}.
// remat's philox4x32(ctr_lo, ctr_hi, key) packs those words little-endian into 64-bit integers:
//   ctr_lo = c0 | c1 << 32,  ctr_hi = c2 | c3 << 32,  key = k0 | k1 << 32,
// and returns {o0, o1, o2, o3} in Random123's order. philox_bits(seed, offset) is therefore
// Random123's philox4x32_10({offset / 4, hi32(offset / 4), 0, 0}, {lo32(seed), hi32(seed)})[offset % 4].
namespace {

struct Kat {
  uint32_t ctr[4], key[2], out[4];
};

constexpr Kat kPhiloxKats[] = {
    {{0x00000000, 0x00000000, 0x00000000, 0x00000000}, {0x00000000, 0x00000000},
     {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
};

uint64_t pack(uint32_t lo, uint32_t hi) { return uint64_t(lo) | uint64_t(hi) << 32; }

Philox4x32 remat_philox(const uint32_t ctr[4], const uint32_t key[2]) {
  return philox4x32(pack(ctr[0], ctr[1]), pack(ctr[2], ctr[3]), pack(key[0], key[1]));
}

// An independent reference written from the paper (Salmon et al., SC'11, and Random123's philox.h):
// word arrays, R rounds, the key bumped by the Weyl constants between rounds (R - 1 bumps).
std::array<uint32_t, 4> reference_philox4x32(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k, int rounds = 10) {
  auto mulhilo = [](uint32_t a, uint32_t b, uint32_t& hi) {
    const uint64_t p = uint64_t(a) * uint64_t(b);
    hi = uint32_t(p >> 32);
    return uint32_t(p);
  };
  for (int r = 0; r < rounds; ++r) {
    if (r > 0) {
      k[0] += 0x9E3779B9u;
      k[1] += 0xBB67AE85u;
    }
    uint32_t hi0, hi1;
    const uint32_t lo0 = mulhilo(0xD2511F53u, c[0], hi0);
    const uint32_t lo1 = mulhilo(0xCD9E8D57u, c[2], hi1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
  }
  return c;
}

}  // namespace

TEST(Philox, Random123KnownAnswers) {
  for (const Kat& kat : kPhiloxKats) {
    const Philox4x32 got = remat_philox(kat.ctr, kat.key);
    for (int w = 0; w < 4; ++w)
      EXPECT_EQ(got.v[w], kat.out[w]) << std::hex << "ctr[0]=0x" << kat.ctr[0] << " word " << w;
  }
}

TEST(Philox, IndependentReferenceMatchesKnownAnswersAndRemat) {
  // The reference is itself checked against the published vectors, so the two cannot share a bug.
  for (const Kat& kat : kPhiloxKats) {
    const auto ref = reference_philox4x32({kat.ctr[0], kat.ctr[1], kat.ctr[2], kat.ctr[3]}, {kat.key[0], kat.key[1]});
    for (int w = 0; w < 4; ++w) ASSERT_EQ(ref[w], kat.out[w]) << "reference, word " << w;
  }
  // Then remat against the reference on counters and keys that exercise every word of both.
  std::mt19937_64 rng(2024);
  for (int i = 0; i < 2000; ++i) {
    const uint64_t lo = rng(), hi = rng(), key = rng();
    const Philox4x32 got = philox4x32(lo, hi, key);
    const auto ref = reference_philox4x32({uint32_t(lo), uint32_t(lo >> 32), uint32_t(hi), uint32_t(hi >> 32)},
                                          {uint32_t(key), uint32_t(key >> 32)});
    for (int w = 0; w < 4; ++w) ASSERT_EQ(got.v[w], ref[w]) << "i=" << i << " word " << w;
  }
  // Fewer rounds give other numbers: the test is sensitive to the round count.
  EXPECT_NE(reference_philox4x32({0, 0, 0, 0}, {0, 0}, 7)[0], kPhiloxKats[0].out[0]);
}

TEST(Philox, BitsAndUniformMapOffsetsToRandom123Words) {
  // Offsets 0..3 of seed 0 are the four words of Random123's all-zero vector.
  for (uint64_t o = 0; o < 4; ++o) EXPECT_EQ(philox_bits(0, o), kPhiloxKats[0].out[o]) << o;
  // Offset o uses counter {lo32(o / 4), hi32(o / 4), 0, 0}, key {lo32(seed), hi32(seed)}, word o % 4.
  const uint64_t seed = pack(0xa4093822, 0x299f31d0);
  for (uint64_t o : {0ull, 5ull, 4095ull, (1ull << 34) + 7, ~0ull}) {
    const uint64_t c = o >> 2;
    const auto ref = reference_philox4x32({uint32_t(c), uint32_t(c >> 32), 0, 0}, {0xa4093822, 0x299f31d0});
    EXPECT_EQ(philox_bits(seed, o), ref[o & 3]) << o;
    EXPECT_EQ(philox_uniform(seed, o), float(ref[o & 3] >> 8) / 16777216.0f) << o;
  }
}
