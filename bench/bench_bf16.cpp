// bf16 kernels against their fp32 twins at GPT shapes: GEMM in GFLOP/s (oneDNN bf16 matmul vs sgemm,
// and whether pre-packed weights pay), naive and flash attention in GFLOP/s, and two memory-bound
// kernels in GB/s. Run with ONEDNN_VERBOSE=1 to see the ISA oneDNN picked for each primitive; on a
// shared machine use --benchmark_repetitions=3 --benchmark_report_aggregates_only=true and read the
// medians.
#include <benchmark/benchmark.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <random>
#include <type_traits>
#include <vector>

#include <omp.h>

#include "kernels/attention.h"
#include "kernels/attention_bf16.h"
#include "kernels/bf16.h"
#include "kernels/dot_bf16.h"
#include "kernels/dropout.h"
#include "kernels/dropout_bf16.h"
#include "kernels/encoder.h"
#include "kernels/flash_attention.h"
#include "kernels/flash_attention_bf16.h"
#include "kernels/gelu.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"
#include "kernels/layernorm.h"
#include "kernels/rope.h"
#include "kernels/vec_bf16.h"

using namespace remat::kernels;

namespace {

std::vector<float> randv(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}
std::vector<bf16> randb(size_t n, uint64_t seed) {
  auto f = randv(n, seed);
  std::vector<bf16> b(n);
  to_bf16(b.data(), f.data(), int64_t(n));
  return b;
}
void set_gflops(benchmark::State& st, double flops) {
  st.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// The three products of a dense layer, range(3) selecting which: 0 forward out(M,N) = inp(M,K) @ W(K,N);
// 1 dinp(M,K) = dout(M,N) @ W^T; 2 dW(K,N) += inp^T @ dout (beta = 1).
void BM_sgemm(benchmark::State& st) {
  const int64_t M = st.range(0), K = st.range(1), N = st.range(2), which = st.range(3);
  auto A = randv(M * K, 1), W = randv(K * N, 2), D = randv(M * N, 3);
  std::vector<float> O(M * N), dA(M * K), dW(K * N);
  for (auto _ : st) {
    if (which == 0) sgemm(false, false, M, N, K, 1.0f, A.data(), K, W.data(), N, 0.0f, O.data(), N);
    if (which == 1) sgemm(false, true, M, K, N, 1.0f, D.data(), N, W.data(), N, 0.0f, dA.data(), K);
    if (which == 2) sgemm(true, false, K, N, M, 1.0f, A.data(), K, D.data(), N, 1.0f, dW.data(), N);
    benchmark::ClobberMemory();
  }
  set_gflops(st, 2.0 * M * N * K);
}

void BM_gemm_bf16(benchmark::State& st) {
  const int64_t M = st.range(0), K = st.range(1), N = st.range(2), which = st.range(3);
  auto A = randb(M * K, 1), W = randb(K * N, 2), D = randb(M * N, 3);
  std::vector<bf16> O(M * N), dA(M * K);
  std::vector<float> dW(K * N);
  for (auto _ : st) {
    if (which == 0) gemm_bf16(false, false, M, N, K, A.data(), K, W.data(), N, 0.0f, O.data(), N);
    if (which == 1) gemm_bf16(false, true, M, K, N, D.data(), N, W.data(), N, 0.0f, dA.data(), K);
    if (which == 2) gemm_bf16(true, false, K, N, M, A.data(), K, D.data(), N, 1.0f, dW.data(), N);
    benchmark::ClobberMemory();
  }
  set_gflops(st, 2.0 * M * N * K);
  const bool out16 = which != 2;
  st.SetLabel(which == 0   ? gemm_bf16_impl(false, false, M, N, K, out16)
              : which == 1 ? gemm_bf16_impl(false, true, M, K, N, out16)
                           : "");
}

// Measures whether pre-packing the weights pays: the forward product with the weights reordered once
// into the layout oneDNN prefers (format_tag::any), against gemm_bf16's plain row-major weights.
// oneDNN allocates this benchmark's packed copy itself; the engine does not pre-pack (see the report).
void BM_gemm_bf16_prepacked(benchmark::State& st) {
  using tag = dnnl::memory::format_tag;
  using dt = dnnl::memory::data_type;
  const int64_t M = st.range(0), K = st.range(1), N = st.range(2);
  auto A = randb(M * K, 1), W = randb(K * N, 2);
  std::vector<bf16> O(M * N);
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s(eng);
  const dnnl::memory::desc a_md({M, K}, dt::bf16, tag::ab), w_any({K, N}, dt::bf16, tag::any),
      w_plain({K, N}, dt::bf16, tag::ab), c_md({M, N}, dt::bf16, tag::ab);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, w_any, c_md), eng);
  dnnl::memory wp(pd.weights_desc(), eng), wsrc(w_plain, eng, W.data());
  dnnl::reorder(wsrc, wp).execute(s, wsrc, wp);
  dnnl::memory a(a_md, eng, A.data()), c(c_md, eng, O.data());
  dnnl::matmul prim(pd);
  for (auto _ : st) {
    prim.execute(s, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, wp}, {DNNL_ARG_DST, c}});
    s.wait();
  }
  set_gflops(st, 2.0 * M * N * K);
  st.SetLabel(pd.impl_info_str());
}

void fwd_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"M", "K", "N"});
  for (auto [K, N] : {std::pair<int64_t, int64_t>{768, 768}, {768, 2304}, {768, 3072}, {3072, 768}, {256, 768}})
    b->Args({2048, K, N});
  b->UseRealTime();
}

void gpt_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"M", "K", "N", "op"});
  for (int64_t op : {0, 1, 2})
    for (auto [K, N] : {std::pair<int64_t, int64_t>{768, 768}, {768, 2304}, {768, 3072}, {3072, 768}, {256, 256},
                        {256, 768}, {256, 1024}, {1024, 256}})
      b->Args({2048, K, N, op});
  b->UseRealTime();
}

// Naive causal attention, forward + backward, B=2 NH=12 HS=64 (GPT-2 small heads), no dropout: the
// fp32 kernel against the bf16 one; range(1) picks the bf16 path (1: AVX512_BF16, 0: portable).
// FLOPs count the causal work as bench_attention.cpp does: 6 matmuls of T*T*HS.
constexpr int64_t kB = 2, kNH = 12, kHS = 64;

using vec_bf16::by_storage;  // the fp32 or the bf16 twin, by storage type
// n random values stored as S (bf16: the fp32 values of the same seed, rounded).
template <class S>
std::vector<S> rand_as(size_t n, uint64_t seed) {
  if constexpr (std::is_same_v<S, float>)
    return randv(n, seed);
  else
    return randb(n, seed);
}

// For bf16, selects the path range(1) asks for while it lives, and labels the benchmark with the
// product path that ran (dot_bf16.h: "amx_bf16" when AMX runs); nothing for fp32.
template <class S>
struct Bf16PathScope {
  benchmark::State& st;
  Bf16Isa prev{};
  explicit Bf16PathScope(benchmark::State& s) : st(s) {
    if constexpr (!std::is_same_v<S, float>) prev = set_bf16_isa(st.range(1) ? Bf16Isa::Avx512Bf16 : Bf16Isa::Portable);
  }
  ~Bf16PathScope() {
    if constexpr (!std::is_same_v<S, float>) {
      st.SetLabel(dot_bf16_rows_path());
      set_bf16_isa(prev);
    }
  }
};

template <class S>
void BM_attention(benchmark::State& st) {
  const Bf16PathScope<S> path(st);
  const int64_t T = st.range(0), C = kNH * kHS, C3 = 3 * C;
  const auto qkv = rand_as<S>(kB * T * C3, 1), dout = rand_as<S>(kB * T * C, 2);
  std::vector<S> out(kB * T * C), probs(kB * kNH * T * T), dqkv(kB * T * C3);
  const auto workspace = by_storage<S>(attention_workspace_floats, attention_bf16_workspace_floats);
  const auto forward = by_storage<S>(attention_forward, attention_bf16_forward);
  const auto backward = by_storage<S>(attention_backward, attention_bf16_backward);
  std::vector<float> ws(workspace(kB, T, kNH, kNH, kHS, omp_get_max_threads()));
  for (auto _ : st) {
    forward(out, probs, qkv, kB, T, kNH, kNH, kHS, 0.f, 1, 0, ws);
    backward(dqkv, dout, qkv, probs, kB, T, kNH, kNH, kHS, 0.f, 1, 0, ws);
    benchmark::ClobberMemory();
  }
  set_gflops(st, 6.0 * kB * kNH * T * T * kHS);
}

template <class S>
void BM_flash(benchmark::State& st) {
  const Bf16PathScope<S> path(st);
  const int64_t T = st.range(0), C = kNH * kHS, C3 = 3 * C;
  const auto qkv = rand_as<S>(kB * T * C3, 1), dout = rand_as<S>(kB * T * C, 2);
  std::vector<S> out(kB * T * C), dqkv(kB * T * C3);
  const auto workspace = by_storage<S>(flash_attention_workspace_floats, flash_attention_bf16_workspace_floats);
  const auto forward = by_storage<S>(flash_attention_forward, flash_attention_bf16_forward);
  const auto backward = by_storage<S>(flash_attention_backward, flash_attention_bf16_backward);
  std::vector<float> lse(kB * kNH * T), ws(workspace(kB, T, kNH, kNH, kHS, omp_get_max_threads()));
  for (auto _ : st) {
    forward(out, lse, qkv, kB, T, kNH, kNH, kHS, 0.f, 1, 0, ws);
    backward(dqkv, dout, qkv, out, lse, kB, T, kNH, kNH, kHS, 0.f, 1, 0, ws);
    benchmark::ClobberMemory();
  }
  set_gflops(st, 6.0 * kB * kNH * T * T * kHS);
}

// Memory-bound kernels at N=2048, C=768: bytes moved per second (reads + writes).
void set_bytes(benchmark::State& st, double bytes) {
  st.counters["GB/s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
constexpr int64_t kRows = 2048, kC = 768;

void BM_layernorm_forward_fp32(benchmark::State& st) {
  auto inp = randv(kRows * kC, 3), w = randv(kC, 4), b = randv(kC, 5);
  std::vector<float> out(kRows * kC), mean(kRows), rstd(kRows);
  for (auto _ : st) {
    layernorm_forward<float>(out, mean, rstd, inp, w, b, kRows, kC);
    benchmark::ClobberMemory();
  }
  set_bytes(st, 2.0 * kRows * kC * 4);
}
void BM_layernorm_forward_bf16(benchmark::State& st) {
  auto inp = randb(kRows * kC, 3);
  auto w = randv(kC, 4), b = randv(kC, 5);
  std::vector<bf16> out(kRows * kC);
  std::vector<float> mean(kRows), rstd(kRows);
  for (auto _ : st) {
    layernorm_forward<bf16>(out, mean, rstd, inp, w, b, kRows, kC);
    benchmark::ClobberMemory();
  }
  set_bytes(st, 2.0 * kRows * kC * 2);
}
void BM_gelu_forward_fp32(benchmark::State& st) {
  auto inp = randv(kRows * 4 * kC, 6);
  std::vector<float> out(inp.size());
  for (auto _ : st) {
    gelu_forward<float>(out, inp, int64_t(inp.size()));
    benchmark::ClobberMemory();
  }
  set_bytes(st, 2.0 * inp.size() * 4);
}
void BM_gelu_forward_bf16(benchmark::State& st) {
  auto inp = randb(kRows * 4 * kC, 6);
  std::vector<bf16> out(inp.size());
  for (auto _ : st) {
    gelu_forward<bf16>(out, inp, int64_t(inp.size()));
    benchmark::ClobberMemory();
  }
  set_bytes(st, 2.0 * inp.size() * 2);
}

}  // namespace

BENCHMARK_TEMPLATE(BM_attention, float)->Name("BM_attention_fp32")->ArgNames({"T"})->Arg(256)->Arg(1024)->UseRealTime();
BENCHMARK_TEMPLATE(BM_attention, bf16)
    ->Name("BM_attention_bf16")
    ->ArgNames({"T", "avx512bf16"})
    ->Args({256, 1})
    ->Args({1024, 1})
    ->Args({256, 0})
    ->UseRealTime();
BENCHMARK_TEMPLATE(BM_flash, float)->Name("BM_flash_fp32")->ArgNames({"T"})->Arg(1024)->UseRealTime();
BENCHMARK_TEMPLATE(BM_flash, bf16)
    ->Name("BM_flash_bf16")
    ->ArgNames({"T", "avx512bf16"})
    ->Args({1024, 1})
    ->UseRealTime();
BENCHMARK(BM_layernorm_forward_fp32)->UseRealTime();
BENCHMARK(BM_layernorm_forward_bf16)->UseRealTime();
BENCHMARK(BM_gelu_forward_fp32)->UseRealTime();
BENCHMARK(BM_gelu_forward_bf16)->UseRealTime();
BENCHMARK(BM_sgemm)->Apply(gpt_shapes);
BENCHMARK(BM_gemm_bf16)->Apply(gpt_shapes);
BENCHMARK(BM_gemm_bf16_prepacked)->Apply(fwd_shapes);

// The bf16 kernels of issue #10's second batch against their fp32 twins, at GPT-2 small shapes (B*T =
// kRows = 2048 rows, C = 768; rope at LLaMA heads, HS = 128): bytes moved per second (reads + writes,
// at each kernel's own element size), forward and backward in one iteration.
namespace {

constexpr int64_t kEncT = 1024, kEncV = 8192;
std::vector<int32_t> bench_tokens() {
  std::vector<int32_t> tok(kRows);
  for (int64_t i = 0; i < kRows; ++i) tok[i] = int32_t((i * 7919) % kEncV);
  return tok;
}

template <class S>
void BM_encoder(benchmark::State& st) {
  const auto wte = randv(kEncV * kC, 1), wpe = randv(kEncT * kC, 2);
  const auto dout = rand_as<S>(kRows * kC, 3);
  const auto tok = bench_tokens();
  std::vector<S> out(kRows * kC);
  std::vector<float> dwte(kEncV * kC), dwpe(kEncT * kC);
  for (auto _ : st) {
    encoder_forward<S>(out, tok.data(), wte, wpe, 2, kRows / 2, kC);
    encoder_backward<S>(dwte, dwpe, dout, tok.data(), 2, kRows / 2, kC);
    benchmark::ClobberMemory();
  }
  // fwd: read wte and wpe rows (fp32), write out; bwd: read dout, read-modify-write dwte and dwpe (fp32).
  set_bytes(st, kRows * kC * (4.0 * 2 + sizeof(S) + sizeof(S) + 4.0 * 4));
}

template <class S>
void BM_dropout(benchmark::State& st) {
  const int64_t N = kRows * kC;
  const auto x = rand_as<S>(N, 4), d = rand_as<S>(N, 5);
  std::vector<S> out(N), dx(N);
  for (auto _ : st) {
    if (st.range(0) == 0) by_storage<S>(dropout_forward, dropout_bf16_forward)(out, x, N, 0.1f, 7, 3);
    if (st.range(0) == 1) by_storage<S>(dropout_backward, dropout_bf16_backward)(dx, d, N, 0.1f, 7, 3);
    benchmark::ClobberMemory();
  }
  set_bytes(st, N * double(sizeof(S)) * (st.range(0) == 0 ? 2 : 3));
}

constexpr int64_t kRopeNH = 8, kRopeKVH = 2, kRopeHS = 128, kRopeT = 1024;
template <class S>
void BM_rope(benchmark::State& st) {
  const int64_t QC = kRopeNH * kRopeHS, KC = kRopeKVH * kRopeHS, C3 = QC + 2 * KC;
  std::vector<float> cs(kRopeT * kRopeHS / 2), sn(cs.size());
  rope_table(cs, sn, kRopeT, kRopeHS, 10000.0f);
  const auto q = rand_as<S>(kRows * QC, 6), k = rand_as<S>(kRows * KC, 7), v = rand_as<S>(kRows * KC, 8),
             g = rand_as<S>(kRows * C3, 9);
  std::vector<S> qkv(kRows * C3), dq(q.size()), dk(k.size()), dv(v.size());
  const auto forward = rope_qkv_forward<S>;
  const auto backward = rope_qkv_backward<S>;
  for (auto _ : st) {
    forward(qkv, q, k, v, cs, sn, 2, kRopeT, kRopeNH, kRopeKVH, kRopeHS);
    backward(dq, dk, dv, g, cs, sn, 2, kRopeT, kRopeNH, kRopeKVH, kRopeHS);
    benchmark::ClobberMemory();
  }
  // fwd: read q, k, v, write qkv; bwd: read dqkv, read-modify-write dq, dk, dv.
  set_bytes(st, kRows * C3 * sizeof(S) * 5.0);
}

// LayerNorm with the fp32 residual stream of --fp32-residual: fp32 input and dinp, bf16 output and dout.
void BM_layernorm_fwdbwd_fp32(benchmark::State& st) {
  const auto x = randv(kRows * kC, 10), d = randv(kRows * kC, 11), w = randv(kC, 12), b = randv(kC, 13);
  std::vector<float> out(kRows * kC), dx(kRows * kC), mean(kRows), rstd(kRows), dw(kC), db(kC);
  for (auto _ : st) {
    layernorm_forward<float>(out, mean, rstd, x, w, b, kRows, kC);
    layernorm_backward<float>(dx, dw, db, d, x, w, mean, rstd, kRows, kC);
    benchmark::ClobberMemory();
  }
  set_bytes(st, kRows * kC * 4.0 * 8);  // fwd: read x, write out; bwd: x, dout, dx (r+w), then x, dout again
}
void BM_layernorm_fwdbwd_mixed(benchmark::State& st) {
  const auto x = randv(kRows * kC, 10), w = randv(kC, 12), b = randv(kC, 13);
  const auto d = randb(kRows * kC, 11);
  std::vector<bf16> out(kRows * kC);
  std::vector<float> dx(kRows * kC), mean(kRows), rstd(kRows), dw(kC), db(kC);
  for (auto _ : st) {
    layernorm_forward<float, bf16>(out, mean, rstd, x, w, b, kRows, kC);
    layernorm_backward<float, bf16>(dx, dw, db, d, x, w, mean, rstd, kRows, kC);
    benchmark::ClobberMemory();
  }
  set_bytes(st, kRows * kC * (4.0 + 2.0 + 4.0 + 2.0 + 8.0 + 4.0 + 2.0));
}

}  // namespace

BENCHMARK_TEMPLATE(BM_encoder, float)->Name("BM_encoder_fp32")->UseRealTime();
BENCHMARK_TEMPLATE(BM_encoder, bf16)->Name("BM_encoder_bf16")->UseRealTime();
BENCHMARK_TEMPLATE(BM_dropout, float)->Name("BM_dropout_fp32")->ArgNames({"bwd"})->Arg(0)->Arg(1)->UseRealTime();
BENCHMARK_TEMPLATE(BM_dropout, bf16)->Name("BM_dropout_bf16")->ArgNames({"bwd"})->Arg(0)->Arg(1)->UseRealTime();
BENCHMARK_TEMPLATE(BM_rope, float)->Name("BM_rope_fp32")->UseRealTime();
BENCHMARK_TEMPLATE(BM_rope, bf16)->Name("BM_rope_bf16")->UseRealTime();
BENCHMARK(BM_layernorm_fwdbwd_fp32)->UseRealTime();
BENCHMARK(BM_layernorm_fwdbwd_mixed)->UseRealTime();
