// The bf16 token + position embedding (encoder.h on bf16) against the fp32 kernel on the same
// weights and the same bf16 dout widened to fp32. The forward is one fp32 sum rounded once, so the bits
// equal the twin's output rounded; the backward sums the exactly widened dout in the twin's order,
// so dwte/dwpe are bit-identical to the twin's (whose gradient is finite-difference checked in
// test_encoder.cpp): a zero, negated, overwritten (not accumulated) or reordered gradient fails.
#include <gtest/gtest.h>
#include <omp.h>

#include <vector>

#include "bf16_twin.h"
#include "fd_check.h"
#include "kernels/encoder.h"

using namespace remat::kernels;
using namespace remat::test;

namespace {

// C = 1100: a full 1024-wide forward chunk plus a partial one, and a partial 64-channel backward block.
constexpr int64_t kB = 3, kT = 17, kC = 1100, kV = 23, kMaxT = 20;

std::vector<int32_t> tokens() {  // every token repeats, so their gradients must accumulate
  std::vector<int32_t> tok(kB * kT);
  for (size_t i = 0; i < tok.size(); ++i) tok[i] = int32_t((i * 7919 + 3) % (kV - 2));  // the last 2 unused
  return tok;
}

}  // namespace

TEST(EncoderBf16, ForwardIsTheFp32TwinRounded) {
  const auto wte = randn(kV * kC, 1), wpe = randn(kMaxT * kC, 2);
  const auto tok = tokens();
  for (bool pos : {true, false}) {
    const std::span<const float> pe = pos ? std::span<const float>(wpe) : std::span<const float>();
    std::vector<bf16> out(kB * kT * kC);
    encoder_forward<bf16>(out, tok.data(), wte, pe, kB, kT, kC);
    std::vector<float> ref(kB * kT * kC);
    encoder_forward<float>(ref, tok.data(), wte, pe, kB, kT, kC);
    expect_bits_of_rounded(out, ref, pos ? "out (wte + wpe)" : "out (wte only)");
  }
}

TEST(EncoderBf16, BackwardEqualsFp32TwinBitForBitAndAccumulates) {
  const auto dout = b16(randn(kB * kT * kC, 3));
  const auto tok = tokens();
  const auto dwte0 = randn(kV * kC, 4), dwpe0 = randn(kMaxT * kC, 5);  // noise: the kernels must add
  for (bool pos : {true, false}) {
    auto dwte = dwte0, dwpe = dwpe0;
    auto rte = dwte0, rpe = dwpe0;
    const std::span<float> gp = pos ? std::span<float>(dwpe) : std::span<float>();
    const std::span<float> rp = pos ? std::span<float>(rpe) : std::span<float>();
    encoder_backward<bf16>(dwte, gp, dout, tok.data(), kB, kT, kC);
    encoder_backward<float>(rte, rp, f32(dout), tok.data(), kB, kT, kC);
    EXPECT_TRUE(bit_equal(dwte, rte)) << "dwte, pos=" << pos;
    EXPECT_TRUE(bit_equal(dwpe, rpe)) << "dwpe, pos=" << pos;  // untouched when pos is false
    EXPECT_FALSE(bit_equal(dwte, dwte0)) << "the gradient must not be zero";
    if (!pos) {
      EXPECT_TRUE(bit_equal(dwpe, dwpe0));
    }
  }
}

TEST(EncoderBf16, IndependentOfThreadCount) {
  const auto wte = randn(kV * kC, 6), wpe = randn(kMaxT * kC, 7);
  const auto dout = b16(randn(kB * kT * kC, 8));
  const auto tok = tokens();
  auto run = [&](int threads) {
    const int nt = omp_get_max_threads();
    omp_set_num_threads(threads);
    std::vector<bf16> out(kB * kT * kC);
    encoder_forward<bf16>(out, tok.data(), wte, wpe, kB, kT, kC);
    std::vector<float> dwte(kV * kC, 0.5f), dwpe(kMaxT * kC, -0.25f);
    encoder_backward<bf16>(dwte, dwpe, dout, tok.data(), kB, kT, kC);
    omp_set_num_threads(nt);
    return std::tuple{f32(out), dwte, dwpe};
  };
  const auto [o1, w1, p1] = run(1);
  const auto [o2, w2, p2] = run(2);
  EXPECT_TRUE(bit_equal(o1, o2) && bit_equal(w1, w2) && bit_equal(p1, p2));
}
