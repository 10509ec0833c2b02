// Shared by test_attention_bf16.cpp and test_flash_attention_bf16.cpp: the product paths the CPU can
// run and a scope that selects one, and the tolerances that hold a bf16 attention kernel to its fp32
// twin run on the same bf16 values widened (each file states why they hold for its kernel).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "attention_ref.h"
#include "bf16_twin.h"
#include "kernels/bf16.h"
#include "kernels/dot_bf16.h"

namespace remat::test {

// The product paths this CPU can run (dot_bf16.h), and a scope that selects one.
struct Bf16Path {
  const char* name;
  kernels::Bf16Isa isa;
  bool amx;
};
inline std::vector<Bf16Path> bf16_paths() {
  using kernels::Bf16Isa;
  std::vector<Bf16Path> v;
  if (kernels::dot_bf16_path::amx_available()) v.push_back({"amx_bf16", Bf16Isa::Avx512Bf16, true});
  if (kernels::bf16_cpu_isa() == Bf16Isa::Avx512Bf16) v.push_back({"avx512_bf16", Bf16Isa::Avx512Bf16, false});
  v.push_back({"portable", Bf16Isa::Portable, false});
  return v;
}
struct UseBf16Path {
  kernels::Bf16Isa isa;
  bool amx;
  explicit UseBf16Path(const Bf16Path& p) : isa(kernels::set_bf16_isa(p.isa)), amx(kernels::set_dot_bf16_amx(p.amx)) {
    EXPECT_STREQ(kernels::dot_bf16_rows_path(), p.name);
  }
  ~UseBf16Path() {
    kernels::set_bf16_isa(isa);
    kernels::set_dot_bf16_amx(amx);
  }
};

// For every path and p in {0, 0.1}: run(p, threads) (a forward and backward) gives the same bits
// on a rerun and on one thread as on two, and the portable path the same bits as AVX512_BF16
// (vdpbf16ps and its emulation; AMX rounds its sums its own way). same(a, b) compares two runs;
// extra(the run on two threads, at) adds a file's own checks.
template <class Run, class Same, class Extra>
void expect_runs_bit_identical(Run run, Same same, Extra extra) {
  for (const Bf16Path& path : bf16_paths())
    for (float p : {0.f, 0.1f}) {
      const UseBf16Path use(path);
      const std::string at = std::string(path.name) + " p=" + std::to_string(p);
      const auto a = run(p, 2);
      EXPECT_TRUE(same(a, run(p, 2))) << "rerun, " << at;
      EXPECT_TRUE(same(a, run(p, 1))) << "threads, " << at;
      extra(a, at);
      if (path.isa == kernels::Bf16Isa::Avx512Bf16 && !path.amx) {
        const UseBf16Path port(bf16_paths().back());
        EXPECT_TRUE(same(a, run(p, 2))) << "portable vs avx512_bf16, p=" << p;
      }
    }
}

// qkv with the V columns replaced by |V| (the same Q and K): the fp32 kernel run on it gives each
// output's sum_j Pd_ij |v_j|, the magnitude its error is measured against.
inline std::vector<float> with_abs_v(const AttnDims& d, std::vector<float> qkv) {
  for (int64_t t = 0; t < d.B * d.T; ++t)
    for (int64_t c = d.v_off(0); c < d.C3(); ++c) qkv[t * d.C3() + c] = std::fabs(qkv[t * d.C3() + c]);
  return qkv;
}

// |out - ref| <= mag / 128 + |ref| / 256 (mag: the fp32 kernel's out on |V|).
inline void expect_out_near(const std::vector<kernels::bf16>& out, const std::vector<float>& ref,
                            const std::vector<float>& mag, const std::string& at) {
  ASSERT_EQ(out.size(), ref.size()) << at;
  for (size_t i = 0; i < out.size(); ++i)
    ASSERT_NEAR(kernels::bf16_to_float(out[i]), ref[i], mag[i] / 128 + std::fabs(ref[i]) / 256 + 1e-6)
        << at << " out " << i;
}

// The gradient the kernel added (got, from init) against the twin's (ref), per part of a qkv row
// (Q, K, V columns): |got - ref| <= 2^-6 of the part's largest added gradient + 2^-7 |ref|. Prints
// each part's worst error relative to that largest gradient.
inline void expect_dqkv_near(const AttnDims& d, const std::vector<float>& got, const std::vector<float>& init,
                             const std::vector<float>& ref, const std::string& at) {
  for (int part = 0; part < 3; ++part) {
    const int64_t c0 = part == 0 ? 0 : part == 1 ? d.k_off(0) : d.v_off(0);
    const int64_t c1 = part == 0 ? d.k_off(0) : part == 1 ? d.v_off(0) : d.C3();
    double gmax = 0, worst = 0;
    for (int64_t t = 0; t < d.B * d.T; ++t)
      for (int64_t c = c0; c < c1; ++c)
        gmax = std::max(gmax, std::fabs(double(ref[t * d.C3() + c]) - init[t * d.C3() + c]));
    for (int64_t t = 0; t < d.B * d.T; ++t)
      for (int64_t c = c0; c < c1; ++c) {
        const int64_t i = t * d.C3() + c;
        const double g = double(ref[i]) - init[i], e = std::fabs(double(got[i]) - ref[i]);
        worst = std::max(worst, e / gmax);
        ASSERT_LE(e, gmax / 64 + std::fabs(ref[i]) / 128 + 1e-6)
            << at << " dqkv part " << part << " at t=" << t << " c=" << c << ": " << got[i] << " vs " << ref[i]
            << " (gradient " << g << ")";
      }
    std::printf("%s part %d: worst |err| / max|grad| = %.4f\n", at.c_str(), part, worst);
  }
}

}  // namespace remat::test
