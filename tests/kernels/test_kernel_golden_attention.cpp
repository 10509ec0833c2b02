// Golden hashes (see test_kernel_golden.cpp) of the kernels around attention: the embedding, RoPE,
// naive and flash attention, fp32 and bf16, forward and backward, with 1 and 2 threads.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstdint>
#include <string>
#include <vector>

#include "golden.h"
#include "kernels/attention.h"
#include "kernels/attention_bf16.h"
#include "kernels/bf16.h"
#include "kernels/encoder.h"
#include "kernels/flash_attention.h"
#include "kernels/flash_attention_bf16.h"
#include "kernels/rope.h"
#include "kernels/vec_bf16.h"

using namespace remat::kernels;
using namespace remat::test;
using vec_bf16::by_storage;

const GoldenTables kTables{{"avx2+fma, gcc 12", {
    {"attention.f32.t1", 0x22e4b47cfa333492ull}, {"attention.f32.t2", 0x22e4b47cfa333492ull},
    {"flash_attention.f32.t1", 0xd2a89e5b208d7dd2ull}, {"flash_attention.f32.t2", 0xd2a89e5b208d7dd2ull},
    {"attention.bf16.t1", 0x78e53856bdf621d3ull}, {"attention.bf16.t2", 0x78e53856bdf621d3ull},
    {"flash_attention.bf16.t1", 0x2adf297ec269d508ull}, {"flash_attention.bf16.t2", 0x2adf297ec269d508ull},
    {"rope.f32.t1", 0xe7cf3fe97caf75aeull}, {"rope.f32.t2", 0xe7cf3fe97caf75aeull},
    {"rope.bf16.t1", 0x2d10d42a7f45b5bcull}, {"rope.bf16.t2", 0x2d10d42a7f45b5bcull},
    {"encoder.f32.t1", 0xb3aaa9f3165182cbull}, {"encoder.f32.t2", 0xb3aaa9f3165182cbull},
    {"encoder.bf16.t1", 0xc5f4786f7b0cad4bull}, {"encoder.bf16.t2", 0xc5f4786f7b0cad4bull},
}}};

namespace {

struct NC {
  int64_t N, C;
};
const NC kRows[] = {{3, 17}, {5, 64}, {4, 1100}};  // ragged, whole vectors, more than one chunk per row

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
      rope_qkv_forward<S>(qkv, q, k, v, cos, sin, a.B, a.T, a.NH, a.KVH, a.HS);
      rope_qkv_backward<S>(dq, dk, dv, d, cos, sin, a.B, a.T, a.NH, a.KVH, a.HS);
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
      encoder_forward<S>(out, tok.data(), wte, wpe, B, T, C);
      encoder_forward<S>(out_nopos, tok.data(), wte, {}, B, T, C);
      encoder_backward<S>(dwte, dwpe, d, tok.data(), B, T, C);
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
