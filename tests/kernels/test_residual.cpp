#include "kernels/residual.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "fd_check.h"

using namespace remat::kernels;
using namespace remat::test;

TEST(Residual, ForwardAndInPlace) {
  const int64_t N = 1001;
  auto a = randn(N, 1), b = randn(N, 2);
  std::vector<float> out(N);
  residual_forward<float>(out, a, b, N);
  for (int64_t i = 0; i < N; ++i) ASSERT_EQ(out[i], a[i] + b[i]);
  auto x = a;
  residual_forward<float>(x, x, b, N);  // out aliasing a: x = x + b
  EXPECT_TRUE(bit_equal(x, out));
  auto y = a;
  add_inplace<float>(y, b, N);
  EXPECT_TRUE(bit_equal(y, out));
}

TEST(Residual, GradientsFiniteDifference) {
  const int64_t N = 37;
  auto a = randn(N, 3), b = randn(N, 4);
  std::vector<float> da(N), db(N);
  fd_check(
      N, [&](std::span<float> out) { residual_forward<float>(out, a, b, N); },
      [&](std::span<const float> dout) { residual_backward<float>(da, db, dout, N); }, {{"a", &a, &da}, {"b", &b, &db}});
}

TEST(Residual, BackwardAccumulatesExactly) {
  const int64_t N = 100;
  auto da = randn(N, 5), db = randn(N, 6), d = randn(N, 7);
  auto da0 = da, db0 = db;
  residual_backward<float>(da, db, d, N);
  for (int64_t i = 0; i < N; ++i) {
    ASSERT_EQ(da[i], da0[i] + d[i]);
    ASSERT_EQ(db[i], db0[i] + d[i]);
  }
}

TEST(Residual, AssignCopiesExactly) {
  const int64_t N = 1001;
  auto s = randn(N, 8);
  std::vector<float> d(N, std::nanf(""));
  assign<float>(d, s, N);
  EXPECT_TRUE(bit_equal(d, s));
}
