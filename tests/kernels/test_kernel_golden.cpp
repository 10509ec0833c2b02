// Golden hashes: the exact bits of the fp32 and bf16 kernels, forward and backward (the mixed
// fp32-in/bf16-out norm and residual forms too), on deterministic pseudo-random inputs of a few shapes
// (sizes not a multiple of 16, rows longer than a 1024-element chunk), with 1 and 2 OpenMP threads.
// Each variant's outputs are hashed (FNV-1a 64 over their bytes) and compared with the constants
// below, recorded from the code before the twins became one template per kernel: a refactoring that
// changes one bit of one output fails here.
//
// The bits depend on the build (FMA contraction under -march=native, oneDNN's ISA path, the bf16 paths
// chosen at run time), so each table holds for the build it was recorded on (golden.h's build()). A
// build without a table runs portable checks instead (repeatability, and the same bits with 1 and 2
// threads) and prints the rows to add. To re-record after an intended change of the bits:
// REMAT_GOLDEN_PRINT=1 prints the table.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "golden.h"
#include "kernels/bf16.h"
#include "kernels/crossentropy.h"
#include "kernels/dropout.h"
#include "kernels/dropout_bf16.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/residual.h"
#include "kernels/rmsnorm.h"
#include "kernels/swiglu.h"
#include "kernels/vec_bf16.h"

using namespace remat::kernels;
using namespace remat::test;
using vec_bf16::by_storage;

const GoldenTables kTables{{"avx2+fma, gcc 12", {
    {"gelu.f32.t1", 0xec881980bcc970c6ull}, {"gelu.f32.t2", 0xec881980bcc970c6ull},
    {"gelu.bf16.t1", 0x1db745d6bef97bf5ull}, {"gelu.bf16.t2", 0x1db745d6bef97bf5ull},
    {"swiglu.f32.t1", 0x2292dae4de483c4aull}, {"swiglu.f32.t2", 0x2292dae4de483c4aull},
    {"swiglu.bf16.t1", 0x4d0f20e195aa0fa7ull}, {"swiglu.bf16.t2", 0x4d0f20e195aa0fa7ull},
    {"residual.f32.t1", 0x992602adccf74f84ull}, {"residual.f32.t2", 0x992602adccf74f84ull},
    {"residual.bf16.t1", 0xa2f1240a636f81faull}, {"residual.bf16.t2", 0xa2f1240a636f81faull},
    {"residual.mixed.t1", 0x451c0af3d8e6d9bfull}, {"residual.mixed.t2", 0x451c0af3d8e6d9bfull},
    {"layernorm.f32.t1", 0x120bc445e969f88cull}, {"layernorm.f32.t2", 0x120bc445e969f88cull},
    {"layernorm.bf16.t1", 0x13a6c473af582432ull}, {"layernorm.bf16.t2", 0x13a6c473af582432ull},
    {"layernorm.mixed.t1", 0x0e10300ad07da41cull}, {"layernorm.mixed.t2", 0x0e10300ad07da41cull},
    {"rmsnorm.f32.t1", 0x0c2dc8832b410c64ull}, {"rmsnorm.f32.t2", 0x0c2dc8832b410c64ull},
    {"rmsnorm.bf16.t1", 0x4e57605ab8d6ec2cull}, {"rmsnorm.bf16.t2", 0x4e57605ab8d6ec2cull},
    {"rmsnorm.mixed.t1", 0x2c694145a350a9cfull}, {"rmsnorm.mixed.t2", 0x2c694145a350a9cfull},
    {"crossentropy.f32.t1", 0x674ba2d985fe64e5ull}, {"crossentropy.f32.t2", 0x674ba2d985fe64e5ull},
    {"crossentropy.bf16.t1", 0x6844db28ce6e295dull}, {"crossentropy.bf16.t2", 0x6844db28ce6e295dull},
    {"matmul.f32.t1", 0x369ba77150d42233ull}, {"matmul.f32.t2", 0x369ba77150d42233ull},
    // bf16 on this build's CPU (no AVX-512): gemm_bf16's widen+sgemm path.
    {"matmul.bf16.t1", 0x04184c062ecaf68aull}, {"matmul.bf16.t2", 0x04184c062ecaf68aull},
    {"dropout.f32.t1", 0x3c8709ae93a854a5ull}, {"dropout.f32.t2", 0x3c8709ae93a854a5ull},
    {"dropout.bf16.t1", 0x1b4c22076970e261ull}, {"dropout.bf16.t2", 0x1b4c22076970e261ull},
}}};

namespace {

const int64_t kSizes[] = {1, 17, 5000};  // one element, a ragged vector, several chunks

template <class S>
void gelu_case() {
  per_threads(std::string("gelu.") + tag<S>(), [](Hash& h) {
    for (int64_t n : kSizes) {
      const auto x = rnd<S>(n, 1, 4.0f), d = rnd<S>(n, 2), dx0 = rnd<S>(n, 3);
      std::vector<S> out(n);
      gelu_forward<S>(out, x, n);
      h.add(out);
      for (bool overwrite : {false, true}) {
        auto dx = dx0;
        gelu_backward<S>(dx, x, d, n, overwrite);
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
      swiglu_forward<S>(out, g, u, n);
      auto in_place = g;  // out aliasing gate
      swiglu_forward<S>(in_place, in_place, u, n);
      swiglu_backward<S>(dg, du, d, g, u, n);
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
      residual_forward<S>(out, a, b, n);
      residual_backward<S>(da, db, d, n);
      add_inplace<S>(acc, d, n);
      assign<S>(copy, d, n);
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
      residual_forward<float, bf16>(out, a, b, n);
      residual_backward<float, bf16>(da, db, d, n);
      add_inplace<float, bf16>(acc, b, n);
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

template <class X, class Y>
void layernorm_case() {
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
      layernorm_forward<X, Y>(out, mean, rstd, x, w, b, N, C);
      layernorm_apply<X, Y>(again, x, w, b, mean, rstd, N, C);
      layernorm_backward<X, Y>(dx, dw, db, d, x, w, mean, rstd, N, C);
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
      rmsnorm_forward<X, Y>(out, rstd, x, w, N, C, 1e-5f);
      rmsnorm_apply<X, Y>(again, x, w, rstd, N, C);
      rmsnorm_backward<X, Y>(dx, dw, d, x, w, rstd, N, C);
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
      crossentropy_forward<S>(losses, lse, x, t.data(), N, V);
      const auto dl = rnd<float>(N, 34);
      auto acc = rnd<S>(N * V, 35);
      std::vector<S> fresh(N * V);
      auto in_place = x;
      const auto bwd = crossentropy_backward<S>;
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
      matmul_forward<S>(out, x, w, bias, N, C, OC);
      matmul_forward<S>(out_nb, x, w, {}, N, C, OC);
      matmul_nt_forward<S>(out_nt, x, w, N, C, OC);  // w read as (OC, C)
      for (const auto* v : {&out, &out_nb, &out_nt}) h.add(*v);
      for (bool overwrite : {false, true}) {
        auto dx = rnd<S>(N * C, 40), dx_nt = dx;
        auto dw = rnd<float>(C * OC, 41), db = rnd<float>(OC, 42), dw_nt = dw;
        matmul_backward<S>(dx, dw, db, d, x, w, N, C, OC, overwrite);
        matmul_nt_backward<S>(dx_nt, dw_nt, d, x, w, N, C, OC, overwrite);
        h.add(dx);
        h.add(dx_nt);
        for (const auto* v : {&dw, &db, &dw_nt}) h.add(*v);
      }
    }
  });
}
TEST_F(Golden, Matmul) {
  matmul_case<float>();
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

}  // namespace
