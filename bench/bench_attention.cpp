// Naive (materialised scores) vs flash attention, causal, HS = 64.
// Args: B, NH (query heads), KVH (key/value heads: NH = multi-head, fewer = grouped-query), T.
// FLOP counts are the useful causal work (a T x T x HS matmul counts as T*T*HS flops
// since half is masked): forward 2 matmuls, backward 4 more; flash's recomputation of S is not counted.
// Run with OMP_NUM_THREADS set; wall-clock time. On a shared machine use repetitions and read the
// "_min" rows, e.g. --benchmark_repetitions=5 --benchmark_report_aggregates_only=true.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <random>
#include <vector>

#include "kernels/attention.h"
#include "kernels/attention_bf16.h"
#include "kernels/bf16.h"
#include "kernels/dot_bf16.h"
#include "kernels/flash_attention.h"
#include "kernels/flash_attention_bf16.h"

using namespace remat::kernels;

namespace {

constexpr int64_t kHS = 64;

struct Bufs {
  int64_t B, NH, KVH, T, C, C3;
  std::vector<float> qkv, out, dout, dqkv, probs, lse, ws_naive, ws_flash;
  Bufs(const benchmark::State& st, bool naive)
      : B(st.range(0)), NH(st.range(1)), KVH(st.range(2)), T(st.range(3)), C(NH * kHS), C3((NH + 2 * KVH) * kHS) {
    std::mt19937 g(1);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    qkv.resize(B * T * C3);
    dout.resize(B * T * C);
    for (auto& x : qkv) x = u(g);
    for (auto& x : dout) x = u(g);
    out.resize(B * T * C);
    dqkv.assign(B * T * C3, 0.f);
    const int threads = omp_get_max_threads();
    if (naive) {
      probs.resize(B * NH * T * T);
      ws_naive.resize(attention_workspace_floats(B, T, NH, KVH, kHS, threads));
    } else {
      lse.resize(B * NH * T);
      ws_flash.resize(flash_attention_workspace_floats(B, T, NH, KVH, kHS, threads));
    }
  }
  double flops(int matmuls) const { return double(matmuls) * B * NH * T * T * kHS; }
};

void finish(benchmark::State& st, const Bufs& b, int matmuls) {
  st.counters["GFLOP/s"] = benchmark::Counter(b.flops(matmuls) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["ws_MB"] = double((b.ws_naive.size() + b.ws_flash.size()) * 4 + b.probs.size() * 4) / 1e6;
}

void BM_naive_fwd(benchmark::State& st) {
  Bufs b(st, true);
  for (auto _ : st) {
    attention_forward(b.out, b.probs, b.qkv, b.B, b.T, b.NH, b.KVH, kHS, 0.f, 1, 0, b.ws_naive);
    benchmark::DoNotOptimize(b.out.data());
  }
  finish(st, b, 2);
}

void BM_flash_fwd(benchmark::State& st) {
  Bufs b(st, false);
  for (auto _ : st) {
    flash_attention_forward(b.out, b.lse, b.qkv, b.B, b.T, b.NH, b.KVH, kHS, 0.f, 1, 0, b.ws_flash);
    benchmark::DoNotOptimize(b.out.data());
  }
  finish(st, b, 2);
}

void BM_naive_fwdbwd(benchmark::State& st) {
  Bufs b(st, true);
  const float p = float(st.range(4)) / 100.f;
  for (auto _ : st) {
    attention_forward(b.out, b.probs, b.qkv, b.B, b.T, b.NH, b.KVH, kHS, p, 1, 0, b.ws_naive);
    attention_backward(b.dqkv, b.dout, b.qkv, b.probs, b.B, b.T, b.NH, b.KVH, kHS, p, 1, 0, b.ws_naive);
    benchmark::DoNotOptimize(b.dqkv.data());
  }
  finish(st, b, 6);
}

void BM_flash_fwdbwd(benchmark::State& st) {
  Bufs b(st, false);
  const float p = float(st.range(4)) / 100.f;
  for (auto _ : st) {
    flash_attention_forward(b.out, b.lse, b.qkv, b.B, b.T, b.NH, b.KVH, kHS, p, 1, 0, b.ws_flash);
    flash_attention_backward(b.dqkv, b.dout, b.qkv, b.out, b.lse, b.B, b.T, b.NH, b.KVH, kHS, p, 1, 0, b.ws_flash);
    benchmark::DoNotOptimize(b.dqkv.data());
  }
  finish(st, b, 6);
}

// Selective recomputation's rebuild of the probabilities in backward: as it was (the whole forward,
// P V included, into a scratch output) and as it is (attention_probs_forward: Q K^T and softmax).
void BM_naive_rebuild_full_forward(benchmark::State& st) {
  Bufs b(st, true);
  for (auto _ : st) {
    attention_forward(b.out, b.probs, b.qkv, b.B, b.T, b.NH, b.KVH, kHS, 0.f, 1, 0, b.ws_naive);
    benchmark::DoNotOptimize(b.probs.data());
  }
  finish(st, b, 2);
}

void BM_naive_rebuild_probs(benchmark::State& st) {
  Bufs b(st, true);
  std::vector<float> ws(attention_probs_workspace_floats(b.T, kHS, omp_get_max_threads()));
  for (auto _ : st) {
    attention_probs_forward(b.probs, b.qkv, b.B, b.T, b.NH, b.KVH, kHS, ws);
    benchmark::DoNotOptimize(b.probs.data());
  }
  finish(st, b, 1);
}

// The bf16 twins (attention_bf16.h, flash_attention_bf16.h) on the same values rounded to bf16, and
// each kernel's backward alone (the forward run once before timing), fp32 and bf16, so that forward
// and backward can be compared separately. The label names the bf16 dot-product path that ran.
struct Bufs16 {
  int64_t B, NH, KVH, T, C, C3;
  std::vector<bf16> qkv, out, dout, dqkv, probs;
  std::vector<float> lse, ws;
  Bufs16(const benchmark::State& st, bool naive)
      : B(st.range(0)), NH(st.range(1)), KVH(st.range(2)), T(st.range(3)), C(NH * kHS), C3((NH + 2 * KVH) * kHS) {
    const Bufs f(st, false);  // the same random values as the fp32 benchmarks
    qkv.resize(f.qkv.size());
    dout.resize(f.dout.size());
    to_bf16(qkv.data(), f.qkv.data(), int64_t(qkv.size()));
    to_bf16(dout.data(), f.dout.data(), int64_t(dout.size()));
    out.resize(B * T * C);
    dqkv.assign(B * T * C3, bf16{0});
    const int threads = omp_get_max_threads();
    if (naive) {
      probs.resize(B * NH * T * T);
      ws.resize(attention_bf16_workspace_floats(B, T, NH, KVH, kHS, threads));
    } else {
      lse.resize(B * NH * T);
      ws.resize(flash_attention_bf16_workspace_floats(B, T, NH, KVH, kHS, threads));
    }
  }
  double flops(int matmuls) const { return double(matmuls) * B * NH * T * T * kHS; }
};

void finish16(benchmark::State& st, const Bufs16& b, int matmuls) {
  st.counters["GFLOP/s"] = benchmark::Counter(b.flops(matmuls) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["ws_MB"] = double(b.ws.size() * 4 + b.probs.size() * 2) / 1e6;
  st.SetLabel(bf16_isa_name(bf16_isa()));
}

void BM_naive_fwd_bf16(benchmark::State& st) {
  Bufs16 b(st, true);
  for (auto _ : st) {
    attention_bf16_forward(b.out, b.probs, b.qkv, b.B, b.T, b.NH, b.KVH, kHS, 0.f, 1, 0, b.ws);
    benchmark::DoNotOptimize(b.out.data());
  }
  finish16(st, b, 2);
}

void BM_flash_fwd_bf16(benchmark::State& st) {
  Bufs16 b(st, false);
  for (auto _ : st) {
    flash_attention_bf16_forward(b.out, b.lse, b.qkv, b.B, b.T, b.NH, b.KVH, kHS, 0.f, 1, 0, b.ws);
    benchmark::DoNotOptimize(b.out.data());
  }
  finish16(st, b, 2);
}

void BM_naive_bwd(benchmark::State& st) {
  Bufs b(st, true);
  attention_forward(b.out, b.probs, b.qkv, b.B, b.T, b.NH, b.KVH, kHS, 0.f, 1, 0, b.ws_naive);
  for (auto _ : st) {
    attention_backward(b.dqkv, b.dout, b.qkv, b.probs, b.B, b.T, b.NH, b.KVH, kHS, 0.f, 1, 0, b.ws_naive);
    benchmark::DoNotOptimize(b.dqkv.data());
  }
  finish(st, b, 4);
}

void BM_naive_bwd_bf16(benchmark::State& st) {
  Bufs16 b(st, true);
  attention_bf16_forward(b.out, b.probs, b.qkv, b.B, b.T, b.NH, b.KVH, kHS, 0.f, 1, 0, b.ws);
  for (auto _ : st) {
    attention_bf16_backward(b.dqkv, b.dout, b.qkv, b.probs, b.B, b.T, b.NH, b.KVH, kHS, 0.f, 1, 0, b.ws);
    benchmark::DoNotOptimize(b.dqkv.data());
  }
  finish16(st, b, 4);
}

void BM_flash_bwd(benchmark::State& st) {
  Bufs b(st, false);
  flash_attention_forward(b.out, b.lse, b.qkv, b.B, b.T, b.NH, b.KVH, kHS, 0.f, 1, 0, b.ws_flash);
  for (auto _ : st) {
    flash_attention_backward(b.dqkv, b.dout, b.qkv, b.out, b.lse, b.B, b.T, b.NH, b.KVH, kHS, 0.f, 1, 0, b.ws_flash);
    benchmark::DoNotOptimize(b.dqkv.data());
  }
  finish(st, b, 4);
}

void BM_flash_bwd_bf16(benchmark::State& st) {
  Bufs16 b(st, false);
  flash_attention_bf16_forward(b.out, b.lse, b.qkv, b.B, b.T, b.NH, b.KVH, kHS, 0.f, 1, 0, b.ws);
  for (auto _ : st) {
    flash_attention_bf16_backward(b.dqkv, b.dout, b.qkv, b.out, b.lse, b.B, b.T, b.NH, b.KVH, kHS, 0.f, 1, 0, b.ws);
    benchmark::DoNotOptimize(b.dqkv.data());
  }
  finish16(st, b, 4);
}

void BM_naive_rebuild_probs_bf16(benchmark::State& st) {
  Bufs16 b(st, true);
  for (auto _ : st) {
    attention_bf16_probs_forward(b.probs, b.qkv, b.B, b.T, b.NH, b.KVH, kHS, b.ws);
    benchmark::DoNotOptimize(b.probs.data());
  }
  finish16(st, b, 1);
}

// The bf16 product kernel of both bf16 attention kernels alone, single-threaded, on one query tile's
// Q K^T (M=16 or 64 queries x N=256 keys x HS=64) and P V (M=16 x N=64 x 512 keys): range(3) = 1
// runs dot_bf16_gemm_rows on its best path (AMX where the CPU has it), 0 forbids AMX (vdpbf16ps, or
// the portable loop without AVX512_BF16). The label names the path.
void BM_dot_bf16(benchmark::State& st) {
  const int64_t M = st.range(0), N = st.range(1), K = st.range(2), KP = K / 2;
  const bool prev = set_dot_bf16_amx(st.range(3) != 0);
  std::vector<uint32_t> A(M * KP, 0x3F803F80u), B(KP * N, 0x3F803F80u);  // pairs of 1.0
  std::vector<float> C(M * N);
  for (auto _ : st) {
    dot_bf16_gemm_rows(false, M, N, KP, A.data(), KP, B.data(), N, C.data(), N);
    benchmark::DoNotOptimize(C.data());
  }
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * M * N * K, benchmark::Counter::kIsIterationInvariantRate);
  st.SetLabel(dot_bf16_rows_path());
  set_dot_bf16_amx(prev);
}

double min_of(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

// Multi-head (GPT-2: KVH = NH) shapes, then one grouped-query row (4 query heads per kv head, as
// LLaMA-3-8B).
void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"B", "NH", "KVH", "T"});
  for (int64_t T : {256, 512, 1024}) b->Args({2, 12, 12, T});
  b->Args({8, 4, 4, 256});
  b->Args({2, 12, 3, 1024});
  b->Unit(benchmark::kMillisecond)->UseRealTime()->ComputeStatistics("min", min_of);
}

// Last arg: dropout p in percent (0 and 10).
void shapes_p(benchmark::internal::Benchmark* b) {
  b->ArgNames({"B", "NH", "KVH", "T", "p%"});
  for (int64_t p : {0, 10}) {
    for (int64_t T : {256, 512, 1024}) b->Args({2, 12, 12, T, p});
    b->Args({8, 4, 4, 256, p});
    b->Args({2, 12, 3, 1024, p});
  }
  b->Unit(benchmark::kMillisecond)->UseRealTime()->ComputeStatistics("min", min_of);
}

// The two GPT training shapes of issue #10 (presets `small`: L12 C256 NH4 T256 B8; `wide`: C768
// NH12 T512 B4; HS = 64 in both), for the fp32-vs-bf16 rows: filter with
// --benchmark_filter=BM_gpt_.
void gpt_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"B", "NH", "KVH", "T"});
  b->Args({8, 4, 4, 256});
  b->Args({4, 12, 12, 512});
  b->Unit(benchmark::kMillisecond)->UseRealTime()->ComputeStatistics("min", min_of);
}

}  // namespace

BENCHMARK(BM_naive_fwd)->Apply(shapes);
BENCHMARK(BM_naive_rebuild_full_forward)->Apply(shapes);
BENCHMARK(BM_naive_rebuild_probs)->Apply(shapes);
BENCHMARK(BM_flash_fwd)->Apply(shapes);
BENCHMARK(BM_naive_fwdbwd)->Apply(shapes_p);
BENCHMARK(BM_flash_fwdbwd)->Apply(shapes_p);
BENCHMARK(BM_naive_fwd)->Apply(gpt_shapes)->Name("BM_gpt_naive_fwd");
BENCHMARK(BM_naive_fwd_bf16)->Apply(gpt_shapes)->Name("BM_gpt_naive_fwd_bf16");
BENCHMARK(BM_naive_bwd)->Apply(gpt_shapes)->Name("BM_gpt_naive_bwd");
BENCHMARK(BM_naive_bwd_bf16)->Apply(gpt_shapes)->Name("BM_gpt_naive_bwd_bf16");
BENCHMARK(BM_naive_rebuild_probs)->Apply(gpt_shapes)->Name("BM_gpt_naive_rebuild_probs");
BENCHMARK(BM_naive_rebuild_probs_bf16)->Apply(gpt_shapes)->Name("BM_gpt_naive_rebuild_probs_bf16");
BENCHMARK(BM_flash_fwd)->Apply(gpt_shapes)->Name("BM_gpt_flash_fwd");
BENCHMARK(BM_flash_fwd_bf16)->Apply(gpt_shapes)->Name("BM_gpt_flash_fwd_bf16");
BENCHMARK(BM_flash_bwd)->Apply(gpt_shapes)->Name("BM_gpt_flash_bwd");
BENCHMARK(BM_flash_bwd_bf16)->Apply(gpt_shapes)->Name("BM_gpt_flash_bwd_bf16");
BENCHMARK(BM_dot_bf16)
    ->ArgNames({"M", "N", "K", "amx"})
    ->ArgsProduct({{16, 64}, {256}, {64}, {0, 1}})
    ->Args({16, 64, 512, 0})
    ->Args({16, 64, 512, 1});
