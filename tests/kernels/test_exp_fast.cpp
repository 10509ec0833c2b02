// exp_fast (kernels/exp_fast.h), the one exp of GELU, SwiGLU and cross-entropy: the 16-lane vector
// form gives the scalar's bits lane for lane, ~1 ulp against std::exp on the normal range, 0 below
// -87.3 (and at -inf), saturation at exp(88), NaN propagated.
#include "kernels/exp_fast.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

using remat::kernels::exp_fast;
typedef float v16f __attribute__((vector_size(64)));

TEST(ExpFast, VectorLanesEqualTheScalarBitForBit) {
  std::vector<float> xs = {0.f, -0.f, 1.f, -1.f, 88.f, 88.5f, 100.f, -87.f, -87.2f, -87.3f, -87.4f, -200.f,
                           1e-30f, -1e-30f, std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(), std::nanf("")};
  std::mt19937 g(5);
  std::uniform_real_distribution<float> u(-100.f, 100.f);
  std::normal_distribution<float> n(0.f, 2.f);
  for (int i = 0; i < 100000; ++i) xs.push_back(i % 2 ? u(g) : n(g));
  while (xs.size() % 16) xs.push_back(0.5f);
  for (size_t i = 0; i < xs.size(); i += 16) {
    v16f v;
    std::memcpy(&v, xs.data() + i, sizeof v);
    const v16f e = exp_fast(v);
    for (int k = 0; k < 16; ++k) {
      const float s = exp_fast(xs[i + k]);
      ASSERT_EQ(std::bit_cast<uint32_t>(s), std::bit_cast<uint32_t>(float(e[k]))) << "x = " << xs[i + k];
    }
  }
}

TEST(ExpFast, AccurateOnTheNormalRangeAndSaturates) {
  for (float x = -87.f; x <= 88.f; x += 0.01337f) {
    const double ref = std::exp(double(x));
    ASSERT_NEAR(exp_fast(x) / ref, 1.0, 4e-7) << x;
  }
  EXPECT_EQ(exp_fast(0.f), 1.f);
  EXPECT_EQ(exp_fast(-87.4f), 0.f);
  EXPECT_EQ(exp_fast(-std::numeric_limits<float>::infinity()), 0.f);
  EXPECT_EQ(exp_fast(1000.f), exp_fast(88.f));
  EXPECT_TRUE(std::isfinite(exp_fast(std::numeric_limits<float>::infinity())));
  EXPECT_TRUE(std::isnan(exp_fast(std::nanf(""))));
}
