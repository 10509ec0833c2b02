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
#include <type_traits>
#include <vector>

#include "kernels/attention.h"
#include "kernels/attention_bf16.h"
#include "kernels/bf16.h"
#include "kernels/dot_bf16.h"
#include "kernels/flash_attention.h"
#include "kernels/flash_attention_bf16.h"
#include "kernels/vec_bf16.h"

using namespace remat::kernels;

namespace {

constexpr int64_t kHS = 64;

using vec_bf16::by_storage;  // the fp32 or the bf16 twin, by storage type

// Buffers of one shape (args B, NH, KVH, T) in storage S, with the workspace of the naive or the
// flash kernel. The values are the same for both storage types (bf16: the fp32 values rounded).
template <class S>
struct Bufs {
  int64_t B, NH, KVH, T, C, C3;
  std::vector<S> qkv, out, dout, dqkv, probs;
  std::vector<float> lse, ws;
  Bufs(const benchmark::State& st, bool naive)
      : B(st.range(0)), NH(st.range(1)), KVH(st.range(2)), T(st.range(3)), C(NH * kHS), C3((NH + 2 * KVH) * kHS) {
    std::mt19937 g(1);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    std::vector<float> q(B * T * C3), d(B * T * C);
    for (auto& x : q) x = u(g);
    for (auto& x : d) x = u(g);
    qkv = convert(q);
    dout = convert(d);
    out.resize(B * T * C);
    dqkv.assign(B * T * C3, S{});
    const int threads = omp_get_max_threads();
    if (naive) {
      probs.resize(B * NH * T * T);
      ws.resize(
          by_storage<S>(attention_workspace_floats, attention_bf16_workspace_floats)(B, T, NH, KVH, kHS, threads));
    } else {
      lse.resize(B * NH * T);
      ws.resize(by_storage<S>(flash_attention_workspace_floats, flash_attention_bf16_workspace_floats)(
          B, T, NH, KVH, kHS, threads));
    }
  }
  static std::vector<S> convert(const std::vector<float>& v) {
    if constexpr (std::is_same_v<S, float>) {
      return v;
    } else {
      std::vector<S> o(v.size());
      to_bf16(o.data(), v.data(), int64_t(v.size()));
      return o;
    }
  }
  double flops(int matmuls) const { return double(matmuls) * B * NH * T * T * kHS; }
  // Each kernel on these buffers, dropout p, seed 1, offset 0.
  void naive_fwd(float p = 0.f) {
    by_storage<S>(attention_forward, attention_bf16_forward)(out, probs, qkv, B, T, NH, KVH, kHS, p, 1, 0, ws);
  }
  void naive_bwd(float p = 0.f) {
    by_storage<S>(attention_backward, attention_bf16_backward)(dqkv, dout, qkv, probs, B, T, NH, KVH, kHS, p, 1, 0, ws);
  }
  void flash_fwd(float p = 0.f) {
    const auto forward = by_storage<S>(flash_attention_forward, flash_attention_bf16_forward);
    forward(out, lse, qkv, B, T, NH, KVH, kHS, p, 1, 0, ws);
  }
  void flash_bwd(float p = 0.f) {
    const auto backward = by_storage<S>(flash_attention_backward, flash_attention_bf16_backward);
    backward(dqkv, dout, qkv, out, lse, B, T, NH, KVH, kHS, p, 1, 0, ws);
  }
};

// Times body() (which returns the buffer it wrote, kept from the optimiser), then reports `matmuls`
// T x T x HS matmuls per iteration, the workspace and, for bf16, the dot-product path that ran.
template <class S, class Body>
void timed(benchmark::State& st, const Bufs<S>& b, int matmuls, Body&& body) {
  for (auto _ : st) benchmark::DoNotOptimize(body());
  st.counters["GFLOP/s"] = benchmark::Counter(b.flops(matmuls) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["ws_MB"] = double(b.ws.size() * 4 + b.probs.size() * sizeof(S)) / 1e6;
  if constexpr (!std::is_same_v<S, float>) st.SetLabel(dot_bf16_rows_path());
}

template <class S>
void BM_naive_fwd(benchmark::State& st) {
  Bufs<S> b(st, true);
  timed(st, b, 2, [&] {
    b.naive_fwd();
    return b.out.data();
  });
}

template <class S>
void BM_flash_fwd(benchmark::State& st) {
  Bufs<S> b(st, false);
  timed(st, b, 2, [&] {
    b.flash_fwd();
    return b.out.data();
  });
}

// Last arg: dropout p in percent.
void BM_naive_fwdbwd(benchmark::State& st) {
  Bufs<float> b(st, true);
  const float p = float(st.range(4)) / 100.f;
  timed(st, b, 6, [&] {
    b.naive_fwd(p);
    b.naive_bwd(p);
    return b.dqkv.data();
  });
}

void BM_flash_fwdbwd(benchmark::State& st) {
  Bufs<float> b(st, false);
  const float p = float(st.range(4)) / 100.f;
  timed(st, b, 6, [&] {
    b.flash_fwd(p);
    b.flash_bwd(p);
    return b.dqkv.data();
  });
}

// Each kernel's backward alone (its forward run once before timing), so that forward and backward
// can be compared separately between fp32 and bf16.
template <class S>
void BM_naive_bwd(benchmark::State& st) {
  Bufs<S> b(st, true);
  b.naive_fwd();
  timed(st, b, 4, [&] {
    b.naive_bwd();
    return b.dqkv.data();
  });
}

template <class S>
void BM_flash_bwd(benchmark::State& st) {
  Bufs<S> b(st, false);
  b.flash_fwd();
  timed(st, b, 4, [&] {
    b.flash_bwd();
    return b.dqkv.data();
  });
}

// Selective recomputation's rebuild of the probabilities in backward: as it was (the whole forward,
// P V included, into a scratch output) and as it is (attention_probs_forward: Q K^T and softmax).
void BM_naive_rebuild_full_forward(benchmark::State& st) {
  Bufs<float> b(st, true);
  timed(st, b, 2, [&] {
    b.naive_fwd();
    return b.probs.data();
  });
}

template <class S>
void BM_naive_rebuild_probs(benchmark::State& st) {
  Bufs<S> b(st, true);
  if constexpr (std::is_same_v<S, float>)  // the fp32 kernel has its own, smaller workspace
    b.ws.assign(attention_probs_workspace_floats(b.T, kHS, omp_get_max_threads()), 0.f);
  timed(st, b, 1, [&] {
    const auto probs_forward = by_storage<S>(attention_probs_forward, attention_bf16_probs_forward);
    probs_forward(b.probs, b.qkv, b.B, b.T, b.NH, b.KVH, kHS, b.ws);
    return b.probs.data();
  });
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

BENCHMARK_TEMPLATE(BM_naive_fwd, float)->Apply(shapes)->Name("BM_naive_fwd");
BENCHMARK(BM_naive_rebuild_full_forward)->Apply(shapes);
BENCHMARK_TEMPLATE(BM_naive_rebuild_probs, float)->Apply(shapes)->Name("BM_naive_rebuild_probs");
BENCHMARK_TEMPLATE(BM_flash_fwd, float)->Apply(shapes)->Name("BM_flash_fwd");
BENCHMARK(BM_naive_fwdbwd)->Apply(shapes_p);
BENCHMARK(BM_flash_fwdbwd)->Apply(shapes_p);
BENCHMARK_TEMPLATE(BM_naive_fwd, float)->Apply(gpt_shapes)->Name("BM_gpt_naive_fwd");
BENCHMARK_TEMPLATE(BM_naive_fwd, bf16)->Apply(gpt_shapes)->Name("BM_gpt_naive_fwd_bf16");
BENCHMARK_TEMPLATE(BM_naive_bwd, float)->Apply(gpt_shapes)->Name("BM_gpt_naive_bwd");
BENCHMARK_TEMPLATE(BM_naive_bwd, bf16)->Apply(gpt_shapes)->Name("BM_gpt_naive_bwd_bf16");
BENCHMARK_TEMPLATE(BM_naive_rebuild_probs, float)->Apply(gpt_shapes)->Name("BM_gpt_naive_rebuild_probs");
BENCHMARK_TEMPLATE(BM_naive_rebuild_probs, bf16)->Apply(gpt_shapes)->Name("BM_gpt_naive_rebuild_probs_bf16");
BENCHMARK_TEMPLATE(BM_flash_fwd, float)->Apply(gpt_shapes)->Name("BM_gpt_flash_fwd");
BENCHMARK_TEMPLATE(BM_flash_fwd, bf16)->Apply(gpt_shapes)->Name("BM_gpt_flash_fwd_bf16");
BENCHMARK_TEMPLATE(BM_flash_bwd, float)->Apply(gpt_shapes)->Name("BM_gpt_flash_bwd");
BENCHMARK_TEMPLATE(BM_flash_bwd, bf16)->Apply(gpt_shapes)->Name("BM_gpt_flash_bwd_bf16");
BENCHMARK(BM_dot_bf16)
    ->ArgNames({"M", "N", "K", "amx"})
    ->ArgsProduct({{16, 64}, {256}, {64}, {0, 1}})
    ->Args({16, 64, 512, 0})
    ->Args({16, 64, 512, 1});
