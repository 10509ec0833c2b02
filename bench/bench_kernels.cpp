// Kernel throughput at GPT-2 shapes: sgemm in GFLOP/s, memory-bound kernels in GB/s
// (bytes = reads + writes the kernel must do at minimum).
#include <benchmark/benchmark.h>

#include <array>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/adamw.h"
#include "kernels/crossentropy.h"
#include "kernels/dropout.h"
#include "kernels/gelu.h"
#include "kernels/gemm.h"
#include "kernels/layernorm.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"

using namespace remat::kernels;

namespace {

std::vector<float> randv(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

void set_bytes(benchmark::State& st, double bytes_per_iter) {
  st.counters["GB/s"] = benchmark::Counter(bytes_per_iter * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// C(M,N) = op(A) @ B(K,N): the forward layout of a Conv1D layer (transA 0), and a weight gradient,
// dW(C_in, C_out) = X^T dY with K the batch's tokens (transA 1). sgemm is remat's, tiled so that its
// bits do not depend on the thread count (kernels/gemm.h); sgemm_onednn is one oneDNN call on all of C,
// threaded as oneDNN chooses: the pair weighs what the tiling costs.
template <auto Gemm>
void BM_gemm(benchmark::State& st) {
  const int64_t M = st.range(0), K = st.range(1), N = st.range(2);
  const bool ta = st.range(3) != 0;
  auto A = randv(M * K, 1), B = randv(K * N, 2);
  std::vector<float> C(M * N);
  for (auto _ : st) {
    Gemm(ta, false, M, N, K, 1.0f, A.data(), ta ? M : K, B.data(), N, 0.0f, C.data(), N);
    benchmark::DoNotOptimize(C.data());
  }
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * M * N * K * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
void gemm_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"M", "K", "N", "tA"});
  for (auto [M, K, N] : {std::array<int64_t, 3>{2048, 256, 768}, {2048, 768, 256}, {2048, 256, 1024},
                         {2048, 1024, 256}, {2048, 768, 2304}, {2048, 768, 3072}})
    b->Args({M, K, N, 0});
  for (auto [M, K, N] : {std::array<int64_t, 3>{768, 2048, 2304}, {768, 2048, 3072}, {3072, 2048, 768}, {64, 2048, 256}})
    b->Args({M, K, N, 1});
  b->UseRealTime();
}
void BM_sgemm(benchmark::State& st) { BM_gemm<sgemm>(st); }
void BM_sgemm_onednn(benchmark::State& st) { BM_gemm<sgemm_onednn>(st); }
BENCHMARK(BM_sgemm)->Apply(gemm_shapes);
BENCHMARK(BM_sgemm_onednn)->Apply(gemm_shapes);

constexpr int64_t kN = 2048, kC = 768;

void BM_layernorm_forward(benchmark::State& st) {
  auto inp = randv(kN * kC, 3), w = randv(kC, 4), b = randv(kC, 5);
  std::vector<float> out(kN * kC), mean(kN), rstd(kN);
  for (auto _ : st) {
    layernorm_forward<float>(out, mean, rstd, inp, w, b, kN, kC);
    benchmark::DoNotOptimize(out.data());
  }
  set_bytes(st, 2.0 * kN * kC * 4);
}
BENCHMARK(BM_layernorm_forward)->UseRealTime();

void BM_layernorm_backward(benchmark::State& st) {
  auto inp = randv(kN * kC, 3), w = randv(kC, 4), b = randv(kC, 5), dout = randv(kN * kC, 6);
  std::vector<float> out(kN * kC), mean(kN), rstd(kN), dinp(kN * kC), dw(kC), db(kC);
  layernorm_forward<float>(out, mean, rstd, inp, w, b, kN, kC);
  for (auto _ : st) {
    layernorm_backward<float>(dinp, dw, db, dout, inp, w, mean, rstd, kN, kC);
    benchmark::DoNotOptimize(dinp.data());
  }
  set_bytes(st, 4.0 * kN * kC * 4);  // inp, dout, dinp read + write
}
BENCHMARK(BM_layernorm_backward)->UseRealTime();

void BM_gelu_forward(benchmark::State& st) {
  // The MLP hidden activation: N x 4C.
  const int64_t n = kN * 4 * kC;
  auto inp = randv(n, 7);
  std::vector<float> out(n);
  for (auto _ : st) {
    gelu_forward<float>(out, inp, n);
    benchmark::DoNotOptimize(out.data());
  }
  set_bytes(st, 2.0 * n * 4);
}
BENCHMARK(BM_gelu_forward)->UseRealTime();

void BM_rmsnorm_forward(benchmark::State& st) {
  auto inp = randv(kN * kC, 3), w = randv(kC, 4);
  std::vector<float> out(kN * kC), rstd(kN);
  for (auto _ : st) {
    rmsnorm_forward<float>(out, rstd, inp, w, kN, kC, 1e-5f);
    benchmark::DoNotOptimize(out.data());
  }
  set_bytes(st, 2.0 * kN * kC * 4);
}
BENCHMARK(BM_rmsnorm_forward)->UseRealTime();

void BM_rmsnorm_backward(benchmark::State& st) {
  auto inp = randv(kN * kC, 3), w = randv(kC, 4), dout = randv(kN * kC, 6);
  std::vector<float> out(kN * kC), rstd(kN), dinp(kN * kC), dw(kC);
  rmsnorm_forward<float>(out, rstd, inp, w, kN, kC, 1e-5f);
  for (auto _ : st) {
    rmsnorm_backward<float>(dinp, dw, dout, inp, w, rstd, kN, kC);
    benchmark::DoNotOptimize(dinp.data());
  }
  set_bytes(st, 4.0 * kN * kC * 4);  // inp, dout, dinp read + write
}
BENCHMARK(BM_rmsnorm_backward)->UseRealTime();

// The LLaMA MLP hidden activation: N x 8C/3 (2048 for C = 768).
constexpr int64_t kHidden = 2048;

void BM_swiglu_forward(benchmark::State& st) {
  const int64_t n = kN * kHidden;
  auto gate = randv(n, 7), up = randv(n, 8);
  std::vector<float> out(n);
  for (auto _ : st) {
    swiglu_forward<float>(out, gate, up, n);
    benchmark::DoNotOptimize(out.data());
  }
  set_bytes(st, 3.0 * n * 4);
}
BENCHMARK(BM_swiglu_forward)->UseRealTime();

void BM_swiglu_backward(benchmark::State& st) {
  const int64_t n = kN * kHidden;
  auto gate = randv(n, 7), up = randv(n, 8), dout = randv(n, 9);
  std::vector<float> dgate(n), dup(n);
  for (auto _ : st) {
    swiglu_backward<float>(dgate, dup, dout, gate, up, n);
    benchmark::DoNotOptimize(dgate.data());
  }
  set_bytes(st, 7.0 * n * 4);  // dout, gate, up read; dgate, dup read + write
}
BENCHMARK(BM_swiglu_backward)->UseRealTime();

// RoPE + qkv packing with grouped-query attention: NH = 12 query heads, KVH = 4, HS = 64, B*T = kN.
void BM_rope_qkv_forward(benchmark::State& st) {
  const int64_t B = 4, T = kN / 4, NH = 12, KVH = 4, HS = 64, QC = NH * HS, KC = KVH * HS;
  auto q = randv(B * T * QC, 10), k = randv(B * T * KC, 11), v = randv(B * T * KC, 12);
  std::vector<float> cos(T * HS / 2), sin(T * HS / 2), qkv(B * T * (QC + 2 * KC));
  rope_table(cos, sin, T, HS, 10000.0f);
  for (auto _ : st) {
    rope_qkv_forward<float>(qkv, q, k, v, cos, sin, B, T, NH, KVH, HS);
    benchmark::DoNotOptimize(qkv.data());
  }
  set_bytes(st, 2.0 * B * T * (QC + 2 * KC) * 4);
}
BENCHMARK(BM_rope_qkv_forward)->UseRealTime();

void BM_rope_qkv_backward(benchmark::State& st) {
  const int64_t B = 4, T = kN / 4, NH = 12, KVH = 4, HS = 64, QC = NH * HS, KC = KVH * HS;
  auto dqkv = randv(B * T * (QC + 2 * KC), 13);
  std::vector<float> cos(T * HS / 2), sin(T * HS / 2), dq(B * T * QC), dk(B * T * KC), dv(B * T * KC);
  rope_table(cos, sin, T, HS, 10000.0f);
  for (auto _ : st) {
    rope_qkv_backward<float>(dq, dk, dv, dqkv, cos, sin, B, T, NH, KVH, HS);
    benchmark::DoNotOptimize(dq.data());
  }
  set_bytes(st, 3.0 * B * T * (QC + 2 * KC) * 4);  // dqkv read; dq, dk, dv read + write
}
BENCHMARK(BM_rope_qkv_backward)->UseRealTime();

void BM_dropout_forward(benchmark::State& st) {
  const int64_t n = kN * kC;
  auto inp = randv(n, 8);
  std::vector<float> out(n);
  uint64_t offset = 0;
  for (auto _ : st) {
    dropout_forward(out, inp, n, 0.1f, 1234, offset);
    offset += uint64_t(n);
    benchmark::DoNotOptimize(out.data());
  }
  set_bytes(st, 2.0 * n * 4);
}
BENCHMARK(BM_dropout_forward)->UseRealTime();

void BM_crossentropy_forward(benchmark::State& st) {
  const int64_t N = 256, V = 50257;
  auto logits = randv(N * V, 9);
  std::vector<int32_t> tgt(N, 17);
  std::vector<float> loss(N), lse(N);
  for (auto _ : st) {
    crossentropy_forward<float>(loss, lse, logits, tgt.data(), N, V);
    benchmark::DoNotOptimize(loss.data());
  }
  set_bytes(st, double(N) * V * 4);
}
BENCHMARK(BM_crossentropy_forward)->UseRealTime();

// The logits' gradient, two ways: as the op did before (a zero-filled (N, V) buffer the kernel adds
// into: the fill, then a read of the logits and a read-modify-write of the gradient), and as it does
// now (written over the logits in place: one read and one write of the (N, V) buffer).
void BM_crossentropy_backward_zero_filled(benchmark::State& st) {
  const int64_t N = 256, V = 50257;
  auto logits = randv(N * V, 9);
  std::vector<int32_t> tgt(N, 17);
  std::vector<float> loss(N), lse(N), dl(N, 1.f / N), d(N * V);
  crossentropy_forward<float>(loss, lse, logits, tgt.data(), N, V);
  for (auto _ : st) {
    std::fill(d.begin(), d.end(), 0.f);
    crossentropy_backward<float>(d, dl, logits, lse, tgt.data(), N, V);
    benchmark::DoNotOptimize(d.data());
  }
  set_bytes(st, double(N) * V * 4 * 4);
}
BENCHMARK(BM_crossentropy_backward_zero_filled)->UseRealTime();

void BM_crossentropy_backward_in_place(benchmark::State& st) {
  const int64_t N = 256, V = 50257;
  auto logits = randv(N * V, 9);
  std::vector<int32_t> tgt(N, 17);
  std::vector<float> loss(N), lse(N), dl(N, 1.f / N);
  crossentropy_forward<float>(loss, lse, logits, tgt.data(), N, V);
  for (auto _ : st) {  // each pass overwrites the previous pass's gradient: the same work
    crossentropy_backward<float>(logits, dl, logits, lse, tgt.data(), N, V, /*overwrite=*/true);
    benchmark::DoNotOptimize(logits.data());
  }
  set_bytes(st, double(N) * V * 4 * 2);
}
BENCHMARK(BM_crossentropy_backward_in_place)->UseRealTime();

void BM_adamw(benchmark::State& st) {
  const int64_t n = 4 << 20;
  auto p = randv(n, 10), g = randv(n, 11);
  std::vector<float> m(n), v(n);
  int64_t t = 0;
  for (auto _ : st) {
    adamw_update(p, g, m, v, n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, ++t);
    benchmark::DoNotOptimize(p.data());
  }
  set_bytes(st, 7.0 * n * 4);  // p, m, v read + write, g read
}
BENCHMARK(BM_adamw)->UseRealTime();

}  // namespace
