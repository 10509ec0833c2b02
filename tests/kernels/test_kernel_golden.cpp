// Golden hashes: the exact bits of the fp32 and bf16 kernels, forward and backward (the mixed
// fp32-in/bf16-out norm and residual forms too), on deterministic pseudo-random inputs of a few shapes
// (sizes not a multiple of 16, rows longer than a 1024-element chunk), with 1 and 2 OpenMP threads.
// Each variant's outputs are hashed (FNV-1a 64 over their bytes) and compared with the constants
// below, recorded from the code before the twins became one template per kernel: a refactoring that
// changes one bit of one output fails here.
//
// The bits depend on the build (FMA contraction under -march=native, oneDNN's ISA path), so the
// constants hold for the configuration they were recorded on (kRecordedOn); elsewhere the test
// skips. To re-record after an intended change of the bits: REMAT_GOLDEN_PRINT=1 prints the table.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/attention.h"
#include "kernels/attention_bf16.h"
#include "kernels/bf16.h"
#include "kernels/crossentropy.h"
#include "kernels/crossentropy_bf16.h"
#include "kernels/dropout.h"
#include "kernels/dropout_bf16.h"
#include "kernels/encoder.h"
#include "kernels/encoder_bf16.h"
#include "kernels/flash_attention.h"
#include "kernels/flash_attention_bf16.h"
#include "kernels/gelu.h"
#include "kernels/gelu_bf16.h"
#include "kernels/gemm_bf16.h"
#include "kernels/layernorm.h"
#include "kernels/layernorm_bf16.h"
#include "kernels/matmul.h"
#include "kernels/matmul_bf16.h"
#include "kernels/residual.h"
#include "kernels/residual_bf16.h"
#include "kernels/rmsnorm.h"
#include "kernels/rmsnorm_bf16.h"
#include "kernels/rope.h"
#include "kernels/rope_bf16.h"
#include "kernels/swiglu.h"
#include "kernels/swiglu_bf16.h"
#include "kernels/vec_bf16.h"

using namespace remat::kernels;
using vec_bf16::by_storage;

namespace {

#if defined(__AVX512F__)
constexpr const char* kIsa = "avx512";
#elif defined(__AVX2__) && defined(__FMA__)
constexpr const char* kIsa = "avx2+fma";
#else
constexpr const char* kIsa = "other";
#endif
const std::string kBuild = std::string(kIsa) + ", gcc " + std::to_string(__GNUC__);
const std::string kRecordedOn = "avx2+fma, gcc 12";

const std::map<std::string, uint64_t> kGolden = {
    {"gelu.f32.t1", 0xec881980bcc970c6ull},
    {"gelu.f32.t2", 0xec881980bcc970c6ull},
    {"gelu.bf16.t1", 0x1db745d6bef97bf5ull},
    {"gelu.bf16.t2", 0x1db745d6bef97bf5ull},
    {"swiglu.f32.t1", 0x2292dae4de483c4aull},
    {"swiglu.f32.t2", 0x2292dae4de483c4aull},
    {"swiglu.bf16.t1", 0x4d0f20e195aa0fa7ull},
    {"swiglu.bf16.t2", 0x4d0f20e195aa0fa7ull},
    {"residual.f32.t1", 0x992602adccf74f84ull},
    {"residual.f32.t2", 0x992602adccf74f84ull},
    {"residual.bf16.t1", 0xa2f1240a636f81faull},
    {"residual.bf16.t2", 0xa2f1240a636f81faull},
    {"residual.mixed.t1", 0x451c0af3d8e6d9bfull},
    {"residual.mixed.t2", 0x451c0af3d8e6d9bfull},
    {"layernorm.f32.t1", 0x120bc445e969f88cull},
    {"layernorm.f32.t2", 0x120bc445e969f88cull},
    {"layernorm.bf16.t1", 0x13a6c473af582432ull},
    {"layernorm.bf16.t2", 0x13a6c473af582432ull},
    {"layernorm.mixed.t1", 0x0e10300ad07da41cull},
    {"layernorm.mixed.t2", 0x0e10300ad07da41cull},
    {"rmsnorm.f32.t1", 0x0c2dc8832b410c64ull},
    {"rmsnorm.f32.t2", 0x0c2dc8832b410c64ull},
    {"rmsnorm.bf16.t1", 0x4e57605ab8d6ec2cull},
    {"rmsnorm.bf16.t2", 0x4e57605ab8d6ec2cull},
    {"rmsnorm.mixed.t1", 0x2c694145a350a9cfull},
    {"rmsnorm.mixed.t2", 0x2c694145a350a9cfull},
    {"crossentropy.f32.t1", 0x674ba2d985fe64e5ull},
    {"crossentropy.f32.t2", 0x674ba2d985fe64e5ull},
    {"crossentropy.bf16.t1", 0x6844db28ce6e295dull},
    {"crossentropy.bf16.t2", 0x6844db28ce6e295dull},
    {"matmul.f32.t1", 0x369ba77150d42233ull},
    {"matmul.f32.t2", 0x96a6a6e05b358466ull},
    {"dropout.f32.t1", 0x3c8709ae93a854a5ull},
    {"dropout.f32.t2", 0x3c8709ae93a854a5ull},
    {"dropout.bf16.t1", 0x1b4c22076970e261ull},
    {"dropout.bf16.t2", 0x1b4c22076970e261ull},
    {"attention.f32.t1", 0x22e4b47cfa333492ull},
    {"attention.f32.t2", 0x22e4b47cfa333492ull},
    {"flash_attention.f32.t1", 0xd2a89e5b208d7dd2ull},
    {"flash_attention.f32.t2", 0xd2a89e5b208d7dd2ull},
    {"attention.bf16.t1", 0x78e53856bdf621d3ull},
    {"attention.bf16.t2", 0x78e53856bdf621d3ull},
    {"flash_attention.bf16.t1", 0x2adf297ec269d508ull},
    {"flash_attention.bf16.t2", 0x2adf297ec269d508ull},
    {"rope.f32.t1", 0xe7cf3fe97caf75aeull},
    {"rope.f32.t2", 0xe7cf3fe97caf75aeull},
    {"rope.bf16.t1", 0x2d10d42a7f45b5bcull},
    {"rope.bf16.t2", 0x2d10d42a7f45b5bcull},
    {"encoder.f32.t1", 0xb3aaa9f3165182cbull},
    {"encoder.f32.t2", 0xb3aaa9f3165182cbull},
    {"encoder.bf16.t1", 0xc5f4786f7b0cad4bull},
    {"encoder.bf16.t2", 0xc5f4786f7b0cad4bull},
};

bool printing() { return std::getenv("REMAT_GOLDEN_PRINT") != nullptr; }

void check(const std::string& name, uint64_t h) {
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
    std::vector<bf16> b(n);
    to_bf16(b.data(), f.data(), int64_t(n));
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

const int64_t kSizes[] = {1, 17, 5000};  // one element, a ragged vector, several chunks

template <class S>
void gelu_case() {
  per_threads(std::string("gelu.") + tag<S>(), [](Hash& h) {
    for (int64_t n : kSizes) {
      const auto x = rnd<S>(n, 1, 4.0f), d = rnd<S>(n, 2), dx0 = rnd<S>(n, 3);
      std::vector<S> out(n);
      by_storage<S>(gelu_forward, gelu_bf16_forward)(out, x, n);
      h.add(out);
      for (bool overwrite : {false, true}) {
        auto dx = dx0;
        by_storage<S>(gelu_backward, gelu_bf16_backward)(dx, x, d, n, overwrite);
        h.add(dx);
      }
    }
  });
}
TEST_F(Golden, Gelu) {
  gelu_case<float>();
  gelu_case<bf16>();
}

template <class S>
void swiglu_case() {
  per_threads(std::string("swiglu.") + tag<S>(), [](Hash& h) {
    for (int64_t n : kSizes) {
      const auto g = rnd<S>(n, 4, 6.0f), u = rnd<S>(n, 5), d = rnd<S>(n, 6);
      auto dg = rnd<S>(n, 7), du = rnd<S>(n, 8);
      std::vector<S> out(n);
      by_storage<S>(swiglu_forward, swiglu_bf16_forward)(out, g, u, n);
      auto in_place = g;  // out aliasing gate
      by_storage<S>(swiglu_forward, swiglu_bf16_forward)(in_place, in_place, u, n);
      by_storage<S>(swiglu_backward, swiglu_bf16_backward)(dg, du, d, g, u, n);
      h.add(out);
      h.add(in_place);
      h.add(dg);
      h.add(du);
    }
  });
}
TEST_F(Golden, Swiglu) {
  swiglu_case<float>();
  swiglu_case<bf16>();
}

template <class S>
void residual_case() {
  per_threads(std::string("residual.") + tag<S>(), [](Hash& h) {
    for (int64_t n : kSizes) {
      const auto a = rnd<S>(n, 9, 3.0f), b = rnd<S>(n, 10), d = rnd<S>(n, 11);
      auto da = rnd<S>(n, 12), db = rnd<S>(n, 13), acc = rnd<S>(n, 14);
      std::vector<S> out(n), copy(n);
      by_storage<S>(residual_forward, residual_bf16_forward)(out, a, b, n);
      by_storage<S>(residual_backward, residual_bf16_backward)(da, db, d, n);
      by_storage<S>(add_inplace, add_inplace_bf16)(acc, d, n);
      by_storage<S>(assign, assign_bf16)(copy, d, n);
      for (const auto* v : {&out, &da, &db, &acc, &copy}) h.add(*v);
    }
  });
}
TEST_F(Golden, Residual) {
  residual_case<float>();
  residual_case<bf16>();
  per_threads("residual.mixed", [](Hash& h) {  // an fp32 stream, a bf16 branch
    for (int64_t n : kSizes) {
      const auto a = rnd<float>(n, 15, 3.0f), d = rnd<float>(n, 16);
      const auto b = rnd<bf16>(n, 17);
      auto da = rnd<float>(n, 18), acc = rnd<float>(n, 19);
      auto db = rnd<bf16>(n, 20);
      std::vector<float> out(n);
      residual_mixed_forward(out, a, b, n);
      residual_mixed_backward(da, db, d, n);
      add_inplace_mixed(acc, b, n);
      h.add(out);
      h.add(da);
      h.add(db);
      h.add(acc);
    }
  });
}

struct NC {
  int64_t N, C;
};
const NC kRows[] = {{3, 17}, {5, 64}, {4, 1100}};  // ragged, whole vectors, more than one chunk per row

// The norm kernels of input type X and output type Y.
template <class X, class Y>
struct Norms {
  static constexpr bool f32 = std::is_same_v<Y, float>, b16 = std::is_same_v<X, bf16>;
  static auto ln_fwd() {
    if constexpr (f32) return layernorm_forward; else if constexpr (b16) return layernorm_bf16_forward; else return layernorm_mixed_forward;
  }
  static auto ln_apply() {
    if constexpr (f32) return layernorm_apply; else if constexpr (b16) return layernorm_bf16_apply; else return layernorm_mixed_apply;
  }
  static auto ln_bwd() {
    if constexpr (f32) return layernorm_backward; else if constexpr (b16) return layernorm_bf16_backward; else return layernorm_mixed_backward;
  }
  static auto rms_fwd() {
    if constexpr (f32) return rmsnorm_forward; else if constexpr (b16) return rmsnorm_bf16_forward; else return rmsnorm_mixed_forward;
  }
  static auto rms_apply() {
    if constexpr (f32) return rmsnorm_apply; else if constexpr (b16) return rmsnorm_bf16_apply; else return rmsnorm_mixed_apply;
  }
  static auto rms_bwd() {
    if constexpr (f32) return rmsnorm_backward; else if constexpr (b16) return rmsnorm_bf16_backward; else return rmsnorm_mixed_backward;
  }
};

template <class X, class Y>
void layernorm_case() {
  using K = Norms<X, Y>;
  per_threads("layernorm." + tag2<X, Y>(), [](Hash& h) {
    for (const NC& s : kRows) {
      const int64_t N = s.N, C = s.C;
      const auto x = rnd<X>(N * C, 21, 2.0f);
      const auto w = rnd<float>(C, 22), b = rnd<float>(C, 23);
      const auto d = rnd<Y>(N * C, 24);
      auto dx = rnd<X>(N * C, 25);
      auto dw = rnd<float>(C, 26), db = rnd<float>(C, 27);
      std::vector<Y> out(N * C), again(N * C);
      std::vector<float> mean(N), rstd(N);
      K::ln_fwd()(out, mean, rstd, x, w, b, N, C);
      K::ln_apply()(again, x, w, b, mean, rstd, N, C);
      K::ln_bwd()(dx, dw, db, d, x, w, mean, rstd, N, C);
      h.add(out);
      h.add(again);
      h.add(mean);
      h.add(rstd);
      h.add(dx);
      h.add(dw);
      h.add(db);
    }
  });
}
TEST_F(Golden, Layernorm) {
  layernorm_case<float, float>();
  layernorm_case<bf16, bf16>();
  layernorm_case<float, bf16>();
}

template <class X, class Y>
void rmsnorm_case() {
  using K = Norms<X, Y>;
  per_threads("rmsnorm." + tag2<X, Y>(), [](Hash& h) {
    for (const NC& s : kRows) {
      const int64_t N = s.N, C = s.C;
      const auto x = rnd<X>(N * C, 28, 2.0f);
      const auto w = rnd<float>(C, 29);
      const auto d = rnd<Y>(N * C, 30);
      auto dx = rnd<X>(N * C, 31);
      auto dw = rnd<float>(C, 32);
      std::vector<Y> out(N * C), again(N * C);
      std::vector<float> rstd(N);
      K::rms_fwd()(out, rstd, x, w, N, C, 1e-5f);
      K::rms_apply()(again, x, w, rstd, N, C);
      K::rms_bwd()(dx, dw, d, x, w, rstd, N, C);
      h.add(out);
      h.add(again);
      h.add(rstd);
      h.add(dx);
      h.add(dw);
    }
  });
}
TEST_F(Golden, Rmsnorm) {
  rmsnorm_case<float, float>();
  rmsnorm_case<bf16, bf16>();
  rmsnorm_case<float, bf16>();
}

template <class S>
void crossentropy_case() {
  per_threads(std::string("crossentropy.") + tag<S>(), [](Hash& h) {
    for (const NC& s : {NC{3, 17}, NC{5, 1500}}) {  // V past one 1024-element chunk
      const int64_t N = s.N, V = s.C;
      const auto x = rnd<S>(N * V, 33, 5.0f);
      std::vector<int32_t> t(N);
      for (int64_t n = 0; n < N; ++n) t[n] = n == 1 ? -1 : int32_t((n * 1031 + 7) % V);  // row 1 ignored
      std::vector<float> losses(N), lse(N);
      by_storage<S>(crossentropy_forward, crossentropy_bf16_forward)(losses, lse, x, t.data(), N, V);
      const auto dl = rnd<float>(N, 34);
      auto acc = rnd<S>(N * V, 35);
      std::vector<S> fresh(N * V);
      auto in_place = x;
      const auto bwd = by_storage<S>(crossentropy_backward, crossentropy_bf16_backward);
      bwd(acc, dl, x, lse, t.data(), N, V, false);
      bwd(fresh, dl, x, lse, t.data(), N, V, true);
      bwd(in_place, dl, in_place, lse, t.data(), N, V, true);
      for (const auto* v : {&acc, &fresh, &in_place}) h.add(*v);
      h.add(losses);
      h.add(lse);
    }
  });
}
TEST_F(Golden, CrossEntropy) {
  crossentropy_case<float>();
  crossentropy_case<bf16>();
}

template <class S>
void matmul_case() {
  per_threads(std::string("matmul.") + tag<S>(), [](Hash& h) {
    struct Shape { int64_t N, C, OC; };
    for (const Shape& s : {Shape{5, 17, 23}, Shape{33, 64, 80}}) {
      const int64_t N = s.N, C = s.C, OC = s.OC;
      const auto x = rnd<S>(N * C, 36), w = rnd<S>(C * OC, 37), d = rnd<S>(N * OC, 38);
      const auto bias = rnd<float>(OC, 39);
      std::vector<S> out(N * OC), out_nb(N * OC), out_nt(N * OC);
      by_storage<S>(matmul_forward, matmul_bf16_forward)(out, x, w, bias, N, C, OC);
      by_storage<S>(matmul_forward, matmul_bf16_forward)(out_nb, x, w, {}, N, C, OC);
      by_storage<S>(matmul_nt_forward, matmul_nt_bf16_forward)(out_nt, x, w, N, C, OC);  // w read as (OC, C)
      for (const auto* v : {&out, &out_nb, &out_nt}) h.add(*v);
      for (bool overwrite : {false, true}) {
        auto dx = rnd<S>(N * C, 40), dx_nt = dx;
        auto dw = rnd<float>(C * OC, 41), db = rnd<float>(OC, 42), dw_nt = dw;
        by_storage<S>(matmul_backward, matmul_bf16_backward)(dx, dw, db, d, x, w, N, C, OC, overwrite);
        by_storage<S>(matmul_nt_backward, matmul_nt_bf16_backward)(dx_nt, dw_nt, d, x, w, N, C, OC, overwrite);
        h.add(dx);
        h.add(dx_nt);
        for (const auto* v : {&dw, &db, &dw_nt}) h.add(*v);
      }
    }
  });
}
// oneDNN's bf16 matmul needs AVX512_BF16 or AMX (or AVX512_CORE); elsewhere it cannot make the primitive.
bool gemm_bf16_runs() {
  try {
    const bf16 a[1] = {}, b[1] = {};
    float c[1];
    gemm_bf16(false, false, 1, 1, 1, a, 1, b, 1, 0.0f, c, 1);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}
TEST_F(Golden, Matmul) {
  matmul_case<float>();
  if (!gemm_bf16_runs()) GTEST_SKIP() << "oneDNN has no bf16 matmul on this CPU";
  matmul_case<bf16>();
}

template <class S>
void dropout_case() {
  per_threads(std::string("dropout.") + tag<S>(), [](Hash& h) {
    for (int64_t n : kSizes) {
      const auto x = rnd<S>(n, 43), d = rnd<S>(n, 44);
      auto dx = rnd<S>(n, 45);
      std::vector<S> out(n);
      by_storage<S>(dropout_forward, dropout_bf16_forward)(out, x, n, 0.1f, 7, 3);
      by_storage<S>(dropout_backward, dropout_bf16_backward)(dx, d, n, 0.1f, 7, 3);
      h.add(out);
      h.add(dx);
    }
  });
}
TEST_F(Golden, Dropout) {
  dropout_case<float>();
  dropout_case<bf16>();
}

struct Heads {
  int64_t B, T, NH, KVH, HS;
};
const Heads kHeads[] = {{1, 17, 2, 1, 16}, {2, 70, 2, 2, 24}};  // grouped-query, ragged T; several tiles

template <class S>
void attention_case() {
  per_threads(std::string("attention.") + tag<S>(), [](Hash& h) {
    for (const Heads& a : kHeads)
      for (float p : {0.0f, 0.1f}) {
        const int64_t C3 = (a.NH + 2 * a.KVH) * a.HS, BT = a.B * a.T;
        const auto qkv = rnd<S>(BT * C3, 46, 2.0f), d = rnd<S>(BT * a.NH * a.HS, 47);
        std::vector<S> out(BT * a.NH * a.HS), probs(a.B * a.NH * a.T * a.T), dqkv(BT * C3);
        const int64_t wn = by_storage<S>(attention_workspace_floats, attention_bf16_workspace_floats)(
            a.B, a.T, a.NH, a.KVH, a.HS, omp_get_max_threads());
        std::vector<float> ws(wn);
        by_storage<S>(attention_forward, attention_bf16_forward)(out, probs, qkv, a.B, a.T, a.NH, a.KVH, a.HS, p, 5,
                                                                 11, ws);
        by_storage<S>(attention_backward, attention_bf16_backward)(dqkv, d, qkv, probs, a.B, a.T, a.NH, a.KVH, a.HS,
                                                                   p, 5, 11, ws);
        for (const auto* v : {&out, &probs, &dqkv}) h.add(*v);
      }
  });
  per_threads(std::string("flash_attention.") + tag<S>(), [](Hash& h) {
    for (const Heads& a : kHeads)
      for (float p : {0.0f, 0.1f}) {
        const int64_t C3 = (a.NH + 2 * a.KVH) * a.HS, BT = a.B * a.T;
        const auto qkv = rnd<S>(BT * C3, 48, 2.0f), d = rnd<S>(BT * a.NH * a.HS, 49);
        std::vector<S> out(BT * a.NH * a.HS), dqkv(BT * C3);
        std::vector<float> lse(a.B * a.NH * a.T);
        const int64_t wn = by_storage<S>(flash_attention_workspace_floats, flash_attention_bf16_workspace_floats)(
            a.B, a.T, a.NH, a.KVH, a.HS, omp_get_max_threads());
        std::vector<float> ws(wn);
        by_storage<S>(flash_attention_forward, flash_attention_bf16_forward)(out, lse, qkv, a.B, a.T, a.NH, a.KVH,
                                                                             a.HS, p, 5, 11, ws);
        by_storage<S>(flash_attention_backward, flash_attention_bf16_backward)(dqkv, d, qkv, out, lse, a.B, a.T, a.NH,
                                                                               a.KVH, a.HS, p, 5, 11, ws);
        h.add(out);
        h.add(lse);
        h.add(dqkv);
      }
  });
}
TEST_F(Golden, Attention) {
  attention_case<float>();
  attention_case<bf16>();
}

template <class S>
void rope_case() {
  per_threads(std::string("rope.") + tag<S>(), [](Hash& h) {
    for (const Heads& a : kHeads) {
      const int64_t BT = a.B * a.T, QC = a.NH * a.HS, KC = a.KVH * a.HS, C3 = QC + 2 * KC;
      std::vector<float> cos(a.T * a.HS / 2), sin(a.T * a.HS / 2);
      rope_table(cos, sin, a.T, a.HS, 10000.0f);
      const auto q = rnd<S>(BT * QC, 50), k = rnd<S>(BT * KC, 51), v = rnd<S>(BT * KC, 52), d = rnd<S>(BT * C3, 53);
      auto dq = rnd<S>(BT * QC, 54), dk = rnd<S>(BT * KC, 55), dv = rnd<S>(BT * KC, 56);
      std::vector<S> qkv(BT * C3);
      by_storage<S>(rope_qkv_forward, rope_qkv_bf16_forward)(qkv, q, k, v, cos, sin, a.B, a.T, a.NH, a.KVH, a.HS);
      by_storage<S>(rope_qkv_backward, rope_qkv_bf16_backward)(dq, dk, dv, d, cos, sin, a.B, a.T, a.NH, a.KVH, a.HS);
      for (const auto* x : {&qkv, &dq, &dk, &dv}) h.add(*x);
    }
  });
}
TEST_F(Golden, Rope) {
  rope_case<float>();
  rope_case<bf16>();
}

template <class S>
void encoder_case() {
  per_threads(std::string("encoder.") + tag<S>(), [](Hash& h) {
    for (const NC& s : kRows) {
      const int64_t B = 2, T = s.N, C = s.C, V = 11;
      std::vector<int32_t> tok(B * T);
      for (int64_t i = 0; i < B * T; ++i) tok[i] = int32_t((i * 7 + 3) % V);
      const auto wte = rnd<float>(V * C, 57), wpe = rnd<float>(T * C, 58);
      const auto d = rnd<S>(B * T * C, 59);
      auto dwte = rnd<float>(V * C, 60), dwpe = rnd<float>(T * C, 61);
      std::vector<S> out(B * T * C), out_nopos(B * T * C);
      by_storage<S>(encoder_forward, encoder_bf16_forward)(out, tok.data(), wte, wpe, B, T, C);
      by_storage<S>(encoder_forward, encoder_bf16_forward)(out_nopos, tok.data(), wte, {}, B, T, C);
      by_storage<S>(encoder_backward, encoder_bf16_backward)(dwte, dwpe, d, tok.data(), B, T, C);
      h.add(out);
      h.add(out_nopos);
      h.add(dwte);
      h.add(dwpe);
    }
  });
}
TEST_F(Golden, Encoder) {
  encoder_case<float>();
  encoder_case<bf16>();
}

}  // namespace
