// Helpers of the golden-hash tests (test_kernel_golden*.cpp; see test_kernel_golden.cpp): each test
// file adds its tables, build -> (name -> FNV-1a 64 of a kernel variant's outputs), with a
// namespace-scope GoldenTables object, so one test binary holds several files' tables.
#pragma once
#include <gtest/gtest.h>
#include <omp.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <tuple>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/dot_bf16.h"

namespace remat::test {

// The compiled build: its ISA, the compiler and the optimisation, which changes the bits too (FMA
// contraction and vectorisation): the sanitizer build (scripts/test-sanitize.sh, -O1) and an
// unoptimised build are other builds. Enough for the fp32 kernels, which choose no path at run time.
inline std::string compiled_build() {
#if defined(__AVX512F__)
  const char* isa = "avx512";
#elif defined(__AVX2__) && defined(__FMA__)
  const char* isa = "avx2+fma";
#else
  const char* isa = "other";
#endif
#if defined(__SANITIZE_ADDRESS__)
  const char* opt = ", sanitizers";
#elif !defined(__OPTIMIZE__)
  const char* opt = ", -O0";
#else
  const char* opt = "";
#endif
  return std::string(isa) + ", gcc " + std::to_string(__GNUC__) + opt;
}

// The build every kernel's bits belong to: the compiled build and the bf16 paths chosen at run time
// (AVX512_BF16 instructions, AMX tiles), as "avx512+bf16+amx, gcc 12".
inline const std::string& build() {
  static const std::string b = [] {
    std::string s = compiled_build();
    std::string runtime;
    if (kernels::bf16_cpu_isa() == kernels::Bf16Isa::Avx512Bf16) runtime += "+bf16";
    if (kernels::dot_bf16_path::amx_available()) runtime += "+amx";
    return s.insert(s.find(','), runtime);
  }();
  return b;
}

using HashTable = std::map<std::string, uint64_t>;
inline std::map<std::string, HashTable>& golden_tables() {
  static std::map<std::string, HashTable> tables;
  return tables;
}
struct GoldenTables {
  GoldenTables(std::initializer_list<std::pair<const std::string, HashTable>> by_build) {
    for (const auto& [b, table] : by_build) golden_tables()[b].insert(table.begin(), table.end());
  }
};

inline bool printing() { return std::getenv("REMAT_GOLDEN_PRINT") != nullptr; }

// This build's table, or null where none was recorded (then per_threads runs the portable checks).
inline const HashTable* recorded() {
  const auto it = golden_tables().find(build());
  return it == golden_tables().end() ? nullptr : &it->second;
}

inline void check(const std::string& name, uint64_t h) {
  if (printing()) {
    std::printf("    {\"%s\", 0x%016llxull},\n", name.c_str(), (unsigned long long)h);
    return;
  }
  const HashTable* table = recorded();
  ASSERT_NE(table, nullptr) << "no golden table for " << build();
  const auto it = table->find(name);
  ASSERT_NE(it, table->end()) << "no golden hash for " << name << " on " << build();
  EXPECT_EQ(it->second, h) << name << ": the kernel's bits changed on " << build();
}

// Whether a recorded build gives `name` different bits with 1 and 2 threads (a kernel whose library
// splits its work by the thread count, as sgemm does); no other kernel may.
inline bool thread_dependent(const std::string& name) {
  for (const auto& [b, table] : golden_tables()) {
    const auto one = table.find(name + ".t1"), two = table.find(name + ".t2");
    if (one != table.end() && two != table.end() && one->second != two->second) return true;
  }
  return false;
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

// Hashes of three outputs of one case, per compiled build; pinned_or_repeatable checks a case's
// outputs against this build's row, or where none was recorded, that a second run gives the same bits.
struct Hashes3 {
  uint64_t a, b, c;
};
// An attention case (batch, sequence, heads, head size, dropout) and its hashes per compiled build.
struct AttentionCase {
  int64_t B, T, NH, HS;
  float p;
  std::map<std::string, Hashes3> by_build;
};
inline uint64_t fnv1a(const std::vector<float>& v) {
  Hash h;
  h.add(v);
  return h.h;
}
template <class Run>
void pinned_or_repeatable(const std::map<std::string, Hashes3>& by_build, const std::string& what, Run&& run) {
  const auto first = run(), again = run();
  const Hashes3 got{fnv1a(std::get<0>(first)), fnv1a(std::get<1>(first)), fnv1a(std::get<2>(first))};
  const auto it = by_build.find(compiled_build());
  if (it == by_build.end()) {
    EXPECT_TRUE(first == again) << what << ": two runs gave different bits";
    std::printf("golden: no row for %s; to pin %s: {\"%s\", {0x%016llxull, 0x%016llxull, 0x%016llxull}}\n",
                compiled_build().c_str(), what.c_str(), compiled_build().c_str(), (unsigned long long)got.a,
                (unsigned long long)got.b, (unsigned long long)got.c);
    return;
  }
  EXPECT_EQ(got.a, it->second.a) << what << ": first output's bits changed";
  EXPECT_EQ(got.b, it->second.b) << what << ": second output's bits changed";
  EXPECT_EQ(got.c, it->second.c) << what << ": third output's bits changed";
}

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

// hash(1 thread) and hash(2 threads) of run(), checked as name.t1 and name.t2 against this build's
// table. On a build with no table the bits are not pinned, and portable checks run instead, which fail
// on any nondeterminism: every variant gives the same bits when run again, and the same bits with 1 and
// 2 threads unless a recorded build shows that it depends on the thread count. The hashes to record
// are printed (REMAT_GOLDEN_PRINT=1 prints them as table rows).
template <class F>
void per_threads(const std::string& name, F&& run) {
  const int saved = omp_get_max_threads();
  const bool pinned = printing() || recorded() != nullptr;
  uint64_t one_thread = 0;
  for (int t : {1, 2}) {
    omp_set_num_threads(t);
    Hash h;
    run(h);
    const std::string key = name + ".t" + std::to_string(t);
    if (pinned) {
      check(key, h.h);
      continue;
    }
    Hash again;
    run(again);
    EXPECT_EQ(h.h, again.h) << key << ": two runs gave different bits";
    if (t == 1) {
      one_thread = h.h;
    } else if (!thread_dependent(name)) {
      EXPECT_EQ(one_thread, h.h) << name << ": 1 and 2 threads gave different bits";
    }
    std::printf("golden: no table for %s; to pin it: {\"%s\", 0x%016llxull}\n", build().c_str(), key.c_str(),
                (unsigned long long)h.h);
  }
  omp_set_num_threads(saved);
}

// The golden tests run on every build: pinned to the bits where this build's table was recorded, and
// held to determinism elsewhere (per_threads).
class Golden : public ::testing::Test {};

}  // namespace remat::test
