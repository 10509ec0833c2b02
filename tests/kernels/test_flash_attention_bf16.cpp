// The bf16 flash attention against the fp32 flash kernel (flash_attention.h) on the same bf16 values
// widened, with and without dropout, multi-head and grouped-query, odd T and HS, on every product
// path the CPU has (AMX, AVX512_BF16, portable); the AVX512_BF16 and portable paths bit for bit;
// run-to-run and thread-count independence on each path.
#include "kernels/flash_attention_bf16.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "fd_check.h"
#include "kernels/bf16.h"
#include "kernels/dot_bf16.h"
#include "kernels/flash_attention.h"

using namespace remat::kernels;
using remat::test::randn;

namespace {

constexpr uint64_t kSeed = 0x5eed1234abcdull, kOffset = 977;

std::vector<bf16> b16(const std::vector<float>& v) {
  std::vector<bf16> o(v.size());
  to_bf16(o.data(), v.data(), int64_t(v.size()));
  return o;
}
std::vector<float> f32(const std::vector<bf16>& v) {
  std::vector<float> o(v.size());
  to_float(o.data(), v.data(), int64_t(v.size()));
  return o;
}
template <class T>
bool same(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// The product paths this CPU can run (dot_bf16.h), and a scope that selects one.
struct Path {
  const char* name;
  Bf16Isa isa;
  bool amx;
};
std::vector<Path> paths() {
  std::vector<Path> v;
  if (dot_bf16_path::amx_available()) v.push_back({"amx_bf16", Bf16Isa::Avx512Bf16, true});
  if (bf16_cpu_isa() == Bf16Isa::Avx512Bf16) v.push_back({"avx512_bf16", Bf16Isa::Avx512Bf16, false});
  v.push_back({"portable", Bf16Isa::Portable, false});
  return v;
}
struct UsePath {
  Bf16Isa isa;
  bool amx;
  explicit UsePath(const Path& p) : isa(set_bf16_isa(p.isa)), amx(set_dot_bf16_amx(p.amx)) {
    EXPECT_STREQ(dot_bf16_rows_path(), p.name);
  }
  ~UsePath() {
    set_bf16_isa(isa);
    set_dot_bf16_amx(amx);
  }
};

struct Dims {
  int64_t B, T, NH, KVH, HS;
  int64_t C3() const { return (NH + 2 * KVH) * HS; }
  int64_t qkv() const { return B * T * C3(); }
  int64_t out() const { return B * T * NH * HS; }
  std::string str() const {
    return "B=" + std::to_string(B) + " T=" + std::to_string(T) + " NH=" + std::to_string(NH) +
           " KVH=" + std::to_string(KVH) + " HS=" + std::to_string(HS);
  }
};

struct Run16 {
  std::vector<bf16> out, dqkv;
  std::vector<float> lse;
};
Run16 run16(const Dims& d, const std::vector<bf16>& qkv, const std::vector<bf16>& dout, const std::vector<bf16>& dq0,
            float p, int threads = 2) {
  Run16 r;
  r.out.assign(d.out(), float_to_bf16(-7.f));
  r.lse.assign(d.B * d.NH * d.T, -7.f);
  r.dqkv = dq0;
  std::vector<float> ws(flash_attention_bf16_workspace_floats(d.B, d.T, d.NH, d.KVH, d.HS, threads), std::nanf(""));
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  flash_attention_bf16_forward(r.out, r.lse, qkv, d.B, d.T, d.NH, d.KVH, d.HS, p, kSeed, kOffset, ws);
  flash_attention_bf16_backward(r.dqkv, dout, qkv, r.out, r.lse, d.B, d.T, d.NH, d.KVH, d.HS, p, kSeed, kOffset, ws);
  omp_set_num_threads(saved);
  return r;
}

struct Run32 {
  std::vector<float> out, lse, dqkv;
};
Run32 run32(const Dims& d, const std::vector<float>& qkv, const std::vector<float>& dout,
            const std::vector<float>& dq0, float p) {
  Run32 r;
  r.out.assign(d.out(), 0.f);
  r.lse.assign(d.B * d.NH * d.T, 0.f);
  r.dqkv = dq0;
  std::vector<float> ws(flash_attention_workspace_floats(d.B, d.T, d.NH, d.KVH, d.HS, omp_get_max_threads()));
  flash_attention_forward(r.out, r.lse, qkv, d.B, d.T, d.NH, d.KVH, d.HS, p, kSeed, kOffset, ws);
  flash_attention_backward(r.dqkv, dout, qkv, r.out, r.lse, d.B, d.T, d.NH, d.KVH, d.HS, p, kSeed, kOffset, ws);
  return r;
}

const Dims kDims[] = {{1, 256, 2, 2, 8}, {2, 100, 4, 2, 16}, {1, 67, 2, 2, 7}, {1, 130, 3, 1, 32}};

}  // namespace

// Tolerances against the fp32 flash kernel on the same inputs, as test_attention_bf16.cpp argues:
//  - out: each tile's probabilities (with the dropout scale) are rounded once to bf16 before P V, at
//    most 2^-8 relative per term: |out - ref| <= 2^-8 sum_j Pd_ij |v_j| (the fp32 kernel on |V|),
//    doubled for margin, plus the output's rounding, 2^-8 |ref|.
//  - lse: fp32 on both sides from the same scores up to summation order and exp: 1e-5 (1 + |lse|).
//  - dqkv: bf16 P, dS and O (in D = dO . O) each round at 2^-8, and terms cancel: 2^-6 of the part's
//    largest gradient plus 2^-7 of its own magnitude. Measured worst case: about half of 2^-6.
TEST(FlashAttentionBf16, MatchesFp32Kernel) {
  for (const Path& path : paths())
  for (const Dims& d : kDims)
    for (float p : {0.f, 0.1f}) {
      const UsePath use(path);
      const std::string at = std::string(path.name) + " " + d.str() + " p=" + std::to_string(p);
      const auto qkv = b16(randn(d.qkv(), 1, 1.5f)), dout = b16(randn(d.out(), 2)), dq0 = b16(randn(d.qkv(), 3));
      const Run16 r = run16(d, qkv, dout, dq0, p);
      const auto qkvf = f32(qkv);
      const Run32 ref = run32(d, qkvf, f32(dout), f32(dq0), p);
      auto qkv_absv = qkvf;
      for (int64_t t = 0; t < d.B * d.T; ++t)
        for (int64_t c = (d.NH + d.KVH) * d.HS; c < d.C3(); ++c) qkv_absv[t * d.C3() + c] = std::fabs(qkv_absv[t * d.C3() + c]);
      const Run32 mag = run32(d, qkv_absv, f32(dout), f32(dq0), p);
      for (size_t i = 0; i < r.lse.size(); ++i)
        ASSERT_NEAR(r.lse[i], ref.lse[i], 1e-5 * (1 + std::fabs(ref.lse[i]))) << at << " lse " << i;
      for (int64_t i = 0; i < d.out(); ++i)
        ASSERT_NEAR(bf16_to_float(r.out[i]), ref.out[i], mag.out[i] / 128 + std::fabs(ref.out[i]) / 256 + 1e-6)
            << at << " out " << i;
      const auto got = f32(r.dqkv), init = f32(dq0);
      for (int part = 0; part < 3; ++part) {
        const int64_t c0 = part == 0 ? 0 : part == 1 ? d.NH * d.HS : (d.NH + d.KVH) * d.HS;
        const int64_t c1 = part == 0 ? d.NH * d.HS : part == 1 ? (d.NH + d.KVH) * d.HS : d.C3();
        double gmax = 0, worst = 0;
        for (int64_t t = 0; t < d.B * d.T; ++t)
          for (int64_t c = c0; c < c1; ++c)
            gmax = std::max(gmax, std::fabs(double(ref.dqkv[t * d.C3() + c]) - init[t * d.C3() + c]));
        for (int64_t t = 0; t < d.B * d.T; ++t)
          for (int64_t c = c0; c < c1; ++c) {
            const int64_t i = t * d.C3() + c;
            const double e = std::fabs(double(got[i]) - ref.dqkv[i]);
            worst = std::max(worst, e / gmax);
            ASSERT_LE(e, gmax / 64 + std::fabs(ref.dqkv[i]) / 128 + 1e-6)
                << at << " dqkv part " << part << " at t=" << t << " c=" << c << ": " << got[i] << " vs " << ref.dqkv[i];
          }
        std::printf("%s part %d: worst |err| / max|grad| = %.4f\n", at.c_str(), part, worst);
      }
    }
}

TEST(FlashAttentionBf16, PathsAndThreadsBitIdentical) {
  const Dims d{2, 100, 4, 2, 16};
  const auto qkv = b16(randn(d.qkv(), 4, 1.5f)), dout = b16(randn(d.out(), 5)), dq0 = b16(randn(d.qkv(), 6));
  for (const Path& path : paths())
    for (float p : {0.f, 0.1f}) {
      const UsePath use(path);
      const std::string at = std::string(path.name) + " p=" + std::to_string(p);
      const Run16 a = run16(d, qkv, dout, dq0, p, 2);
      const Run16 again = run16(d, qkv, dout, dq0, p, 2);
      EXPECT_TRUE(same(a.out, again.out) && same(a.lse, again.lse) && same(a.dqkv, again.dqkv)) << "rerun, " << at;
      const Run16 one = run16(d, qkv, dout, dq0, p, 1);
      EXPECT_TRUE(same(a.out, one.out) && same(a.lse, one.lse) && same(a.dqkv, one.dqkv)) << "threads, " << at;
      // vdpbf16ps and its portable emulation: the same bits (AMX rounds its sums its own way).
      if (path.isa == Bf16Isa::Avx512Bf16 && !path.amx) {
        const UsePath port(paths().back());
        const Run16 b = run16(d, qkv, dout, dq0, p, 2);
        EXPECT_TRUE(same(a.out, b.out) && same(a.lse, b.lse)) << "forward, portable vs avx512_bf16, p=" << p;
        EXPECT_TRUE(same(a.dqkv, b.dqkv)) << "dqkv, portable vs avx512_bf16, p=" << p;
      }
    }
}
