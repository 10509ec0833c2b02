#include "kernels/encoder.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <vector>

#include "fd_check.h"

using namespace remat::kernels;
using namespace remat::test;

TEST(Encoder, ForwardValues) {
  const int64_t B = 2, T = 3, C = 5, V = 7, maxT = 4;
  auto wte = randn(V * C, 1), wpe = randn(maxT * C, 2);
  const std::vector<int32_t> tok = {3, 0, 6, 6, 1, 3};
  std::vector<float> out(B * T * C);
  encoder_forward<float>(out, tok.data(), wte, wpe, B, T, C);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c)
        EXPECT_EQ(out[(b * T + t) * C + c], wte[tok[b * T + t] * C + c] + wpe[t * C + c]);
}

TEST(Encoder, GradientsFiniteDifference) {
  // Repeated tokens (3 and 6) check that their gradients accumulate.
  const int64_t B = 2, T = 3, C = 5, V = 7, maxT = 4;
  auto wte = randn(V * C, 3), wpe = randn(maxT * C, 4);
  const std::vector<int32_t> tok = {3, 0, 6, 6, 1, 3};
  std::vector<float> dwte(V * C), dwpe(maxT * C);
  FdOptions opt;
  opt.atol_frac = 1e-3;
  // Unused rows (tokens 2, 4, 5; position 3) must get exactly zero: the FD check covers that too.
  fd_check(
      B * T * C, [&](std::span<float> out) { encoder_forward<float>(out, tok.data(), wte, wpe, B, T, C); },
      [&](std::span<const float> dout) { encoder_backward<float>(dwte, dwpe, dout, tok.data(), B, T, C); },
      {{"wte", &wte, &dwte}, {"wpe", &wpe, &dwpe}}, opt);
}

TEST(Encoder, BackwardIndependentOfThreadCount) {
  const int64_t B = 4, T = 64, C = 200, V = 50;
  std::vector<int32_t> tok(B * T);
  for (size_t i = 0; i < tok.size(); ++i) tok[i] = int32_t((i * 7919) % V);
  auto dout = randn(B * T * C, 5);
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    std::vector<float> dwte(V * C, 0.5f), dwpe(T * C, -0.25f);
    encoder_backward<float>(dwte, dwpe, dout, tok.data(), B, T, C);
    omp_set_num_threads(2);
    return std::pair{dwte, dwpe};
  };
  auto [w1, p1] = run(2);
  auto [w2, p2] = run(2);
  auto [w3, p3] = run(1);
  EXPECT_TRUE(bit_equal(w1, w2) && bit_equal(p1, p2));
  EXPECT_TRUE(bit_equal(w1, w3) && bit_equal(p1, p3));
  // Spot-check against a serial reference.
  std::vector<double> ref(C, 0.5);
  for (int64_t bt = 0; bt < B * T; ++bt)
    if (tok[bt] == 7)
      for (int64_t c = 0; c < C; ++c) ref[c] += dout[bt * C + c];
  for (int64_t c = 0; c < C; ++c) EXPECT_NEAR(w1[7 * C + c], ref[c], 1e-4);
}

TEST(Encoder, EmptyWpeMeansNoPositions) {
  // LLaMA: out = wte[token], and an empty dwpe is skipped; dwte matches the GPT-2 path's bit for bit.
  const int64_t B = 2, T = 3, C = 37, V = 7;
  auto wte = randn(V * C, 6);
  const std::vector<int32_t> tok = {3, 0, 6, 6, 1, 3};
  std::vector<float> out(B * T * C, -1.0f);
  encoder_forward<float>(out, tok.data(), wte, {}, B, T, C);
  for (int64_t bt = 0; bt < B * T; ++bt)
    for (int64_t c = 0; c < C; ++c) ASSERT_EQ(out[bt * C + c], wte[tok[bt] * C + c]);

  auto dout = randn(B * T * C, 7);
  std::vector<float> dwte(V * C, 0.5f), dwte_ref(V * C, 0.5f), dwpe(T * C, 0.0f);
  encoder_backward<float>(dwte, {}, dout, tok.data(), B, T, C);
  encoder_backward<float>(dwte_ref, dwpe, dout, tok.data(), B, T, C);
  EXPECT_TRUE(bit_equal(dwte, dwte_ref));

  std::vector<float> g(V * C);
  FdOptions opt;
  opt.atol_frac = 1e-3;
  fd_check(
      B * T * C, [&](std::span<float> o) { encoder_forward<float>(o, tok.data(), wte, {}, B, T, C); },
      [&](std::span<const float> d) { encoder_backward<float>(g, {}, d, tok.data(), B, T, C); }, {{"wte", &wte, &g}}, opt);
}
