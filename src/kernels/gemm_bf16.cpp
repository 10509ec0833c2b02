#include "kernels/gemm_bf16.h"

#include <omp.h>

#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <type_traits>

#include "core/allocator.h"
#include "core/error.h"
#include "core/tensor.h"
#include "kernels/gemm.h"

namespace remat::kernels {

namespace {

using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;

struct Key {
  bool ta, tb, c_bf16, has_bias, in_parallel;
  int64_t M, N, K, lda, ldb, ldc;
  float beta;
  int threads;
  auto tie() const { return std::tie(ta, tb, c_bf16, has_bias, in_parallel, M, N, K, lda, ldb, ldc, beta, threads); }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};

struct Entry {
  dnnl::matmul prim;
  size_t scratch_bytes = 0;
  std::string impl;
  // oneDNN has no bf16 matmul on this CPU (one without AVX-512, where oneDNN 2.6 has none): the
  // operands are widened exactly into fp32 scratch (scratch_bytes) and multiplied by sgemm.
  bool widen = false;
};

dnnl::engine& engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

std::mutex g_mu;
std::map<Key, Entry>& cache() {
  static std::map<Key, Entry> c;
  return c;
}

// The memory descriptors of one product. A transposed operand is described by its strides, so no
// copy is made on our side (oneDNN packs as it sees fit).
struct Descs {
  dnnl::memory::desc a, b, c, bias;
};
Descs descs(const Key& k) {
  Descs d;
  d.a = dnnl::memory::desc(dims{k.M, k.K}, dt::bf16, k.ta ? dims{1, k.lda} : dims{k.lda, 1});
  d.b = dnnl::memory::desc(dims{k.K, k.N}, dt::bf16, k.tb ? dims{1, k.ldb} : dims{k.ldb, 1});
  d.c = dnnl::memory::desc(dims{k.M, k.N}, k.c_bf16 ? dt::bf16 : dt::f32, dims{k.ldc, 1});
  if (k.has_bias) d.bias = dnnl::memory::desc(dims{1, k.N}, dt::f32, dims{k.N, 1});
  return d;
}

const Entry& lookup(const Key& k) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = cache().find(k);
  if (it != cache().end()) return it->second;
  const Descs d = descs(k);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (k.beta != 0.0f) {
    dnnl::post_ops po;
    po.append_sum(k.beta);
    attr.set_post_ops(po);
  }
  const dnnl::matmul::desc md = k.has_bias ? dnnl::matmul::desc(d.a, d.b, d.bias, d.c) : dnnl::matmul::desc(d.a, d.b, d.c);
  Entry e;
  try {
    dnnl::matmul::primitive_desc pd(md, attr, engine());
    e.scratch_bytes = pd.scratchpad_desc().get_size();
    e.impl = pd.impl_info_str();
    e.prim = dnnl::matmul(pd);
  } catch (const dnnl::error&) {
    e.widen = true;
    e.scratch_bytes = sizeof(float) * size_t(k.M * k.K + k.K * k.N + (k.c_bf16 ? k.M * k.N : 0));
    e.impl = "widen+sgemm";
  }
  return cache().emplace(k, std::move(e)).first->second;
}

Key make_key(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc, float beta,
             bool c_bf16, bool has_bias) {
  return Key{ta, tb, c_bf16, has_bias, omp_in_parallel() != 0, M, N, K, lda, ldb, ldc, beta, omp_get_max_threads()};
}

// The product on a CPU without a bf16 matmul: op(A) and op(B) widened exactly into `w` (as stored,
// made contiguous), multiplied by sgemm in fp32; a bf16 C goes through fp32 scratch too, rounded once.
template <class CT>
void widened_product(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda, const bf16* B,
                     int64_t ldb, float beta, CT* C, int64_t ldc, const float* bias, float* w) {
  const int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
  float* a = w;
  float* b = a + M * K;
  for (int64_t i = 0; i < ar; ++i) to_float(a + i * ac, A + i * lda, ac);
  for (int64_t i = 0; i < br; ++i) to_float(b + i * bc, B + i * ldb, bc);
  float* c = nullptr;
  int64_t ldw = ldc;
  if constexpr (std::is_same_v<CT, bf16>) {
    c = b + K * N;
    ldw = N;
    if (beta != 0.0f)
      for (int64_t i = 0; i < M; ++i) to_float(c + i * N, C + i * ldc, N);
  } else {
    c = C;
  }
  sgemm(ta, tb, M, N, K, 1.0f, a, ac, b, bc, beta, c, ldw);
  if (bias)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) c[i * ldw + j] += bias[j];
  if constexpr (std::is_same_v<CT, bf16>)
    for (int64_t i = 0; i < M; ++i) to_bf16(C + i * ldc, c + i * N, N);
}

template <class CT>
void run(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda, const bf16* B, int64_t ldb,
         float beta, CT* C, int64_t ldc, const float* bias) {
  constexpr bool c_bf16 = std::is_same_v<CT, bf16>;
  REMAT_ASSERT(M >= 0 && N >= 0 && K >= 0, "gemm_bf16: negative dimension");
  if (M == 0 || N == 0) return;
  REMAT_ASSERT(ldc >= N, "gemm_bf16: leading dimension too small");
  if (K == 0 && shape_only()) return;
  if (K == 0) {
    // Nothing to multiply: C = bias + beta * C, as the primitive would give (never handed to oneDNN).
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        float c = bias ? bias[j] : 0.0f;
        if (beta != 0.0f) {
          if constexpr (c_bf16)
            c += beta * bf16_to_float(C[i * ldc + j]);
          else
            c += beta * C[i * ldc + j];
        }
        if constexpr (c_bf16)
          C[i * ldc + j] = float_to_bf16(c);
        else
          C[i * ldc + j] = c;
      }
    return;
  }
  REMAT_ASSERT(lda >= (ta ? M : K) && ldb >= (tb ? K : N), "gemm_bf16: leading dimension too small");
  const Key k = make_key(ta, tb, M, N, K, lda, ldb, ldc, beta, c_bf16, bias != nullptr);
  const Entry& e = lookup(k);
  static const std::string kScratchName = "gemm_bf16.scratchpad";
  if (shape_only()) {
    // A dry run (core/tensor.h): no product, but the scratchpad the real call would take, counted
    // for the length of the call, so that a dry run's peaks and allocation count equal the real run's.
    if (e.scratch_bytes) {
      Allocator& a = accountant();
      a.account(e.scratch_bytes, Category::Workspace, kScratchName);
      a.unaccount(e.scratch_bytes, Category::Workspace, kScratchName);
    }
    return;
  }
  if (e.widen) {
    Allocator& alloc = Allocator::global();
    float* w = static_cast<float*>(alloc.allocate(e.scratch_bytes, Category::Workspace, kScratchName));
    widened_product(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc, bias, w);
    alloc.release(w, e.scratch_bytes, Category::Workspace, kScratchName);
    return;
  }
  const Descs d = descs(k);
  dnnl::engine& eng = engine();
  // oneDNN's memory objects only wrap our pointers (it never writes A, B or the bias).
  dnnl::memory a(d.a, eng, const_cast<bf16*>(A)), b(d.b, eng, const_cast<bf16*>(B)), c(d.c, eng, C);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}};
  if (bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(d.bias, eng, const_cast<float*>(bias)));
  Allocator& alloc = Allocator::global();
  void* scratch = e.scratch_bytes ? alloc.allocate(e.scratch_bytes, Category::Workspace, kScratchName) : nullptr;
  if (scratch)
    args.emplace(DNNL_ARG_SCRATCHPAD,
                 dnnl::memory(dnnl::memory::desc(dims{int64_t(e.scratch_bytes)}, dt::u8, dims{1}), eng, scratch));
  {
    thread_local dnnl::stream s(eng);
    e.prim.execute(s, args);
    s.wait();
  }
  if (scratch) alloc.release(scratch, e.scratch_bytes, Category::Workspace, kScratchName);
}

}  // namespace

void gemm_bf16(bool transA, bool transB, int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda, const bf16* B,
               int64_t ldb, float beta, float* C, int64_t ldc, const float* bias) {
  run(transA, transB, M, N, K, A, lda, B, ldb, beta, C, ldc, bias);
}

void gemm_bf16(bool transA, bool transB, int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda, const bf16* B,
               int64_t ldb, float beta, bf16* C, int64_t ldc, const float* bias) {
  run(transA, transB, M, N, K, A, lda, B, ldb, beta, C, ldc, bias);
}

const char* gemm_bf16_impl(bool transA, bool transB, int64_t M, int64_t N, int64_t K, bool bf16_out) {
  const Key k = make_key(transA, transB, M, N, K, transA ? M : K, transB ? K : N, N, 0.0f, bf16_out, false);
  return lookup(k).impl.c_str();  // entries are never erased: the string lives as long as the process
}

int64_t gemm_bf16_cached_primitives() {
  std::lock_guard<std::mutex> lock(g_mu);
  return int64_t(cache().size());
}

}  // namespace remat::kernels
