// Test helpers for the kernels: seeded random data and a finite-difference gradient check.
//
// fd_check(n_out, forward, backward, inputs): with random weights w, loss = sum(out * w) (in double).
// The backward kernel gets dout = w and must leave d loss / d x in each input's grad; each checked
// element of x is nudged by +-eps and (L+ - L-) / 2 eps compared against it. It also checks that the
// backward ADDS into its outputs: re-run on grads pre-filled with noise must give noise + gradient.
#pragma once
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace remat::test {

inline std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline std::vector<float> uniform(size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline bool bit_equal(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](float x, float y) {
           return std::bit_cast<uint32_t>(x) == std::bit_cast<uint32_t>(y);
         });
}

// One differentiable input: its values (nudged in place during the check) and its gradient buffer.
struct GradInput {
  std::string name;
  std::vector<float>* x;
  std::vector<float>* grad;
};

struct FdOptions {
  float eps = 1e-3f;
  double rtol = 1e-2;       // per element: |a - n| <= rtol * max(|a|, |n|) + atol
  double atol_frac = 1e-2;  // atol = atol_frac * max |analytic| over the input (float noise floor)
  size_t max_checks = 256;  // elements checked per input (evenly strided when larger)
  bool check_accumulate = true;
  uint64_t seed = 1234;
};

inline void fd_check(size_t n_out, const std::function<void(std::span<float>)>& forward,
                     const std::function<void(std::span<const float>)>& backward,
                     const std::vector<GradInput>& inputs, FdOptions opt = {}) {
  const std::vector<float> w = randn(n_out, opt.seed);
  std::vector<float> out(n_out);
  auto loss = [&] {
    forward(out);
    double s = 0.0;
    for (size_t i = 0; i < n_out; ++i) s += double(out[i]) * double(w[i]);
    return s;
  };

  for (const auto& in : inputs) std::fill(in.grad->begin(), in.grad->end(), 0.0f);
  backward(w);
  std::vector<std::vector<float>> analytic;
  for (const auto& in : inputs) analytic.push_back(*in.grad);

  // The many tiny forward calls run on one thread: parallel regions on a busy 2-core machine cost far
  // more than the work. (Every kernel here gives the same bits for any thread count.)
  struct Restore {
    int n;
    ~Restore() { omp_set_num_threads(n); }
  } restore{omp_get_max_threads()};
  omp_set_num_threads(1);
  for (size_t k = 0; k < inputs.size(); ++k) {
    const auto& in = inputs[k];
    const auto& a = analytic[k];
    ASSERT_EQ(a.size(), in.x->size()) << in.name;
    double amax = 0.0;
    for (float g : a) amax = std::max(amax, double(std::fabs(g)));
    ASSERT_GT(amax, 0.0) << in.name << ": gradient is identically zero";
    const double atol = opt.atol_frac * amax;
    const size_t n = in.x->size(), stride = std::max<size_t>(1, n / opt.max_checks);
    double err2 = 0.0, ref2 = 0.0;
    for (size_t i = 0; i < n; i += stride) {
      float& xi = (*in.x)[i];
      const float saved = xi;
      xi = saved + opt.eps;
      const double lp = loss();
      xi = saved - opt.eps;
      const double lm = loss();
      xi = saved;
      // Divide by the step actually taken (x +- eps is rounded in float).
      const double num = (lp - lm) / (double(saved + opt.eps) - double(saved - opt.eps));
      const double tol = opt.rtol * std::max(std::fabs(num), std::fabs(double(a[i]))) + atol;
      EXPECT_NEAR(a[i], num, tol) << in.name << "[" << i << "]";
      err2 += (a[i] - num) * (a[i] - num);
      ref2 += num * num;
    }
    EXPECT_LE(std::sqrt(err2), opt.rtol * std::sqrt(ref2) + 1e-12) << in.name << ": relative L2 error";
  }
  omp_set_num_threads(restore.n);

  if (opt.check_accumulate) {
    std::vector<std::vector<float>> noise;
    for (size_t k = 0; k < inputs.size(); ++k) {
      noise.push_back(randn(inputs[k].grad->size(), opt.seed + 1 + k));
      *inputs[k].grad = noise.back();
    }
    backward(w);
    for (size_t k = 0; k < inputs.size(); ++k)
      for (size_t i = 0; i < noise[k].size(); ++i) {
        const double expect = double(noise[k][i]) + double(analytic[k][i]);
        ASSERT_NEAR((*inputs[k].grad)[i], expect, 1e-5 * (std::fabs(expect) + 1.0))
            << inputs[k].name << "[" << i << "]: backward must add into its output";
      }
  }
}

}  // namespace remat::test
