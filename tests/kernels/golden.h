// Helpers of the golden-hash tests (test_kernel_golden*.cpp; see test_kernel_golden.cpp): each test
// binary defines its table remat::test::kGolden, name -> FNV-1a 64 of a kernel variant's outputs.
#pragma once
#include <gtest/gtest.h>
#include <omp.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/bf16.h"

namespace remat::test {

extern const std::map<std::string, uint64_t> kGolden;

#if defined(__AVX512F__)
inline constexpr const char* kIsa = "avx512";
#elif defined(__AVX2__) && defined(__FMA__)
inline constexpr const char* kIsa = "avx2+fma";
#else
inline constexpr const char* kIsa = "other";
#endif
// The optimisation changes the bits too (FMA contraction and vectorisation): the sanitizer build
// (scripts/test-sanitize.sh, -O1) and an unoptimised build are other builds.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr const char* kOpt = ", sanitizers";
#elif !defined(__OPTIMIZE__)
inline constexpr const char* kOpt = ", -O0";
#else
inline constexpr const char* kOpt = "";
#endif
inline const std::string kBuild = std::string(kIsa) + ", gcc " + std::to_string(__GNUC__) + kOpt;
inline const std::string kRecordedOn = "avx2+fma, gcc 12";

inline bool printing() { return std::getenv("REMAT_GOLDEN_PRINT") != nullptr; }

inline void check(const std::string& name, uint64_t h) {
  if (printing()) {
    std::printf("    {\"%s\", 0x%016llxull},\n", name.c_str(), (unsigned long long)h);
    return;
  }
  const auto it = kGolden.find(name);
  ASSERT_NE(it, kGolden.end()) << "no golden hash for " << name;
  EXPECT_EQ(it->second, h) << name << ": the kernel's bits changed";
}

// FNV-1a 64 over the bytes of every vector added.
struct Hash {
  uint64_t h = 1469598103934665603ull;
  template <class T>
  void add(const std::vector<T>& v) {
    const auto* p = reinterpret_cast<const unsigned char*>(v.data());
    for (size_t i = 0; i < v.size() * sizeof(T); ++i) h = (h ^ p[i]) * 1099511628211ull;
  }
};

// Uniform in [-scale, scale) from splitmix64 (portable, unlike std's distributions); bf16: rounded.
template <class S>
std::vector<S> rnd(size_t n, uint64_t seed, float scale = 1.0f) {
  std::vector<float> f(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& x : f) {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    x = scale * (float(z >> 40) / float(1 << 23) - 1.0f);
  }
  if constexpr (std::is_same_v<S, float>) {
    return f;
  } else {
    std::vector<kernels::bf16> b(n);
    kernels::to_bf16(b.data(), f.data(), int64_t(n));
    return b;
  }
}

template <class S>
const char* tag() {
  return std::is_same_v<S, float> ? "f32" : "bf16";
}
// "f32", "bf16" or "mixed" (fp32 input, bf16 output).
template <class X, class Y>
std::string tag2() {
  return std::is_same_v<X, Y> ? tag<X>() : "mixed";
}

// hash(1 thread) and hash(2 threads) of run(), checked as name.t1 and name.t2.
template <class F>
void per_threads(const std::string& name, F&& run) {
  const int saved = omp_get_max_threads();
  for (int t : {1, 2}) {
    omp_set_num_threads(t);
    Hash h;
    run(h);
    check(name + ".t" + std::to_string(t), h.h);
  }
  omp_set_num_threads(saved);
}

class Golden : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!printing() && kBuild != kRecordedOn)
      GTEST_SKIP() << "golden hashes recorded on " << kRecordedOn << ", this build is " << kBuild;
  }
};

}  // namespace remat::test
