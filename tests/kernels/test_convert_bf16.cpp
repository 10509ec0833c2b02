#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "kernels/bf16.h"

using namespace remat::kernels;

namespace {

bool is_nan_bits(uint32_t u) { return (u & 0x7FFFFFFFu) > 0x7F800000u; }

// Independent reference for a non-NaN float: of the two bf16 neighbours (truncation and the next
// one up in magnitude), the nearer in exact (double) arithmetic, ties to the even one.
uint16_t ref_rne(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t lo = uint16_t(u >> 16), hi = uint16_t(lo + 1);
  const double x = std::fabs(double(f));
  const double a = std::fabs(double(bf16_to_float(bf16{lo})));
  // The next magnitude up: for 0x7F7F that is 0x7F80 (inf), which counts as 2^128 for the tie rule.
  const double b = (hi & 0x7FFF) == 0x7F80 ? std::ldexp(1.0, 128) : std::fabs(double(bf16_to_float(bf16{hi})));
  if (x - a < b - x) return lo;
  if (b - x < x - a) return hi;
  return (lo & 1) ? hi : lo;
}

std::vector<float> all_classes(size_t n, uint64_t seed) {
  // Random bit patterns cover every class (NaNs, infinities, denormals, zeros, normals) in proportion;
  // add ties, near-ties and the edges explicitly.
  std::mt19937_64 rng(seed);
  std::vector<float> v;
  for (size_t i = 0; i < n; ++i) {
    uint32_t u = uint32_t(rng());
    switch (i % 8) {
      case 0: u = (u & 0xFFFF0000u) | 0x8000u; break;        // exact tie
      case 1: u = (u & 0xFFFF0000u) | 0x7FFFu; break;        // just below a tie
      case 2: u = (u & 0xFFFF0000u) | 0x8001u; break;        // just above a tie
      case 3: u = (u & 0x807FFFFFu); break;                  // denormal or zero
      case 4: u = (u & 0x80FFFFFFu) | 0x7F000000u; break;    // near the top: overflow, inf, NaN
      default: break;
    }
    v.push_back(std::bit_cast<float>(u));
  }
  for (uint32_t u : {0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0x7F800001u, 0xFF800001u,
                     0x7F7FFFFFu, 0x7F7F8000u, 0x7F7F7FFFu, 0x00000001u, 0x807FFFFFu, 0x007F8000u, 0x00008000u})
    v.push_back(std::bit_cast<float>(u));
  return v;
}

}  // namespace

TEST(Bf16, EveryBf16RoundTripsThroughFloat) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = bf16_to_float(bf16{uint16_t(b)});
    ASSERT_EQ(std::bit_cast<uint32_t>(f), b << 16);  // widening is a shift
    const uint16_t back = float_to_bf16(f).bits;
    if (is_nan_bits(b << 16))
      ASSERT_EQ(back, uint16_t(b | 0x40)) << std::hex << b;  // NaN kept, same sign and payload, quiet
    else
      ASSERT_EQ(back, uint16_t(b)) << std::hex << b;  // denormals included
  }
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3F808000u)).bits, 0x3F80);  // tie, even below
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3F818000u)).bits, 0x3F82);  // tie, even above
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0xBF818000u)).bits, 0xBF82);  // negative tie
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3F807FFFu)).bits, 0x3F80);
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3F808001u)).bits, 0x3F81);
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3FFF8000u)).bits, 0x4000);  // carry into the exponent
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()).bits, 0x7F80);  // rounds to +inf
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x00008000u)).bits, 0x0000);  // denormal tie, to even zero
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x00018000u)).bits, 0x0002);
  EXPECT_TRUE(std::isnan(round_bf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x7F800001u)).bits, 0x7FC0);  // signalling NaN quietened
  for (float f : all_classes(200000, 1)) {
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_bf16(f).bits, ref_rne(f)) << std::hex << std::bit_cast<uint32_t>(f);
  }
}

TEST(Bf16, BothPathsGiveIdenticalBits) {
  if (bf16_cpu_isa() != Bf16Isa::Avx512Bf16) GTEST_SKIP() << "no AVX512_BF16 on this CPU";
  const std::vector<float> src = all_classes(100003, 2);  // not a multiple of 32: the tail runs too
  std::vector<float> every;  // and every bf16 value widened, NaNs included
  for (uint32_t b = 0; b < 65536; ++b) every.push_back(bf16_to_float(bf16{uint16_t(b)}));
  for (const std::vector<float>* v : {&src, static_cast<const std::vector<float>*>(&every)})
    for (int64_t off : {0, 1, 7}) {
      const int64_t n = int64_t(v->size()) - off;
      std::vector<bf16> a(n), b(n);
      bf16_path::to_bf16_portable(a.data(), v->data() + off, n);
      bf16_path::to_bf16_avx512(b.data(), v->data() + off, n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(a[i].bits, b[i].bits) << "at " << i << " input " << std::hex << std::bit_cast<uint32_t>((*v)[off + i]);
        ASSERT_EQ(a[i].bits, float_to_bf16((*v)[off + i]).bits);
      }
    }
}

TEST(Bf16, DispatchCanBeForcedAndParallelMatchesSerial) {
  const Bf16Isa cpu = bf16_cpu_isa();
  const Bf16Isa prev = set_bf16_isa(Bf16Isa::Portable);
  EXPECT_EQ(bf16_isa(), Bf16Isa::Portable);
  const std::vector<float> src = all_classes(70001, 3);
  const int64_t n = int64_t(src.size());
  std::vector<bf16> a(n), b(n);
  to_bf16_parallel(a.data(), src.data(), n);
  set_bf16_isa(Bf16Isa::Avx512Bf16);
  EXPECT_EQ(bf16_isa(), cpu);  // clamped to what the CPU has
  to_bf16(b.data(), src.data(), n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(a[i].bits, b[i].bits) << i;
  std::vector<float> f(n);
  to_float_parallel(f.data(), b.data(), n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(std::bit_cast<uint32_t>(f[i]), uint32_t(b[i].bits) << 16) << i;
  set_bf16_isa(prev);
  EXPECT_STREQ(bf16_isa_name(Bf16Isa::Portable), "portable");
  EXPECT_STREQ(bf16_isa_name(Bf16Isa::Avx512Bf16), "avx512_bf16");
}
