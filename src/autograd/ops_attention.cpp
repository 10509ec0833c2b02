// Causal self-attention: the naive kernel (materialises (B, NH, T, T)) and its fused flash twin.
#include <omp.h>

#include <memory>

#include "autograd/ops.h"
#include "core/error.h"
#include "autograd/dispatch.h"
#include "kernels/attention_decode.h"
#include "kernels/attention_kernels.h"

namespace remat::autograd {
namespace {

struct Dims {
  int64_t B, T, NH, KVH, HS;
  int64_t C() const { return NH * HS; }  // output channels
};

Tensor workspace(size_t floats, const std::string& name) {
  return Tensor::empty({int64_t(floats)}, Category::Workspace, name);
}

// The op's FLOPs, declared once: the forward, the backward and the selective rebuild of the
// probabilities are sums of these parts. Per causal (query, key) pair of each query head
// (B * NH * T(T+1)/2 pairs):
//   QK^T      2 HS   (a multiply-add per channel of the head)
//   softmax   5      (max, subtract, exp, sum, scale by 1/sum)
//   dropout   1      (p > 0: the kept probabilities scaled by 1/(1-p))
//   P V       2 HS
// The backward's products dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q are 2 HS each; the
// softmax's backward is 5 (dot product, subtract, two multiplies); dropout masks P and dP (2).
// Flash's backward also recomputes QK^T and P = exp(S - lse) (2), forms dS = P (dP - D) scale (3),
// and D = rowsum(dO * O) per query row (2 HS).
struct AttnFlops {
  double pairs = 0, rows = 0, HS = 0;
  bool drop = false;
  AttnFlops(const Dims& d, float p)
      : pairs(double(d.B) * double(d.NH) * double(d.T) * double(d.T + 1) / 2.0),
        rows(double(d.B) * double(d.NH) * double(d.T)), HS(double(d.HS)), drop(p > 0.f) {}
  double product() const { return 2.0 * HS * pairs; }  // one causal T x T x HS product
  double softmax() const { return 5.0 * pairs; }
  double dropout(int n) const { return drop ? double(n) * pairs : 0.0; }
  double forward() const { return product() + softmax() + dropout(1) + product(); }  // QK^T, softmax, dropout, PV
  // Selective recomputation rebuilds the pre-dropout probabilities: QK^T and the softmax, no PV.
  double rebuild_probs() const { return product() + softmax(); }
  double naive_backward() const { return 4.0 * product() + 5.0 * pairs + dropout(2); }
  double flash_backward() const { return 5.0 * product() + 2.0 * pairs + 3.0 * pairs + 2.0 * HS * rows + dropout(2); }
};

// Scratch floats of each kernel, by dtype (the bf16 kernels stage tiles differently).
int64_t naive_ws(const Dims& d, DType dt, int threads) {
  return dispatch(dt, [&]<class S>() { return kernels::Kernels<S>::attention_workspace(d.B, d.T, d.NH, d.KVH, d.HS, threads); });
}
int64_t flash_ws(const Dims& d, DType dt, int threads) {
  return dispatch(dt, [&]<class S>() { return kernels::Kernels<S>::flash_workspace(d.B, d.T, d.NH, d.KVH, d.HS, threads); });
}

struct NaiveAttentionNode : Node {
  struct { Saved qkv, probs; } s;  // probs: (B, NH, T, T), pre-dropout
  Dims d{};
  float p = 0;
  Rng rng;
  static constexpr const char* kOp = "attention";
  const char* op() const override { return kOp; }
  void backward(GradTable& g) override {
    Tensor* dout = g.find_id(outputs[0]);
    Tensor ws = workspace(naive_ws(d, dout->dtype(), omp_get_max_threads()), name + ".workspace");
    const Tensor qkv = s.qkv.get(), probs = s.probs.get();  // probs may be rebuilt here (selective)
    Tensor& dqkv = g.get(s.qkv.ref);  // created before the kernel, which a dry run skips
    if (shape_only()) return;
    dispatch(dout->dtype(), [&]<class S>() {
      kernels::Kernels<S>::attention_backward(span_of<S>(dqkv), cspan_of<S>(*dout), cspan_of<S>(qkv),
                                              cspan_of<S>(probs), d.B, d.T, d.NH, d.KVH, d.HS, p, rng.seed,
                                              rng.offset, ws.span());
    });
  }
};

struct FlashAttentionNode : Node {
  struct { Saved qkv, out, lse; } s;  // lse: (B, NH, T)
  Dims d{};
  float p = 0;
  Rng rng;
  static constexpr const char* kOp = "flash_attention";
  const char* op() const override { return kOp; }
  void backward(GradTable& g) override {
    Tensor* dout = g.find_id(outputs[0]);
    Tensor ws = workspace(flash_ws(d, dout->dtype(), omp_get_max_threads()), name + ".workspace");
    const Tensor qkv = s.qkv.get(), out = s.out.get(), lse = s.lse.get();
    Tensor& dqkv = g.get(s.qkv.ref);
    if (shape_only()) return;
    dispatch(dout->dtype(), [&]<class S>() {
      kernels::Kernels<S>::flash_backward(span_of<S>(dqkv), cspan_of<S>(*dout), cspan_of<S>(qkv), cspan_of<S>(out),
                                          lse.cspan(), d.B, d.T, d.NH, d.KVH, d.HS, p, rng.seed, rng.offset, ws.span());
    });
  }
};

}  // namespace

const char* attention_kind_name(AttentionKind k) { return k == AttentionKind::Flash ? "flash" : "naive"; }

Tensor attention(const Tensor& qkv, int64_t NH, int64_t KVH, float p, Rng rng, AttentionKind kind,
                 const std::string& name) {
  REMAT_ASSERT(qkv.shape().size() == 3 && NH > 0 && KVH > 0 && NH % KVH == 0 && qkv.dim(2) % (NH + 2 * KVH) == 0,
               "attention: qkv must be (B, T, (NH + 2*KVH) * HS) with KVH dividing NH");
  const Dims d{qkv.dim(0), qkv.dim(1), NH, KVH, qkv.dim(2) / (NH + 2 * KVH)};
  const int64_t HS = d.HS;
  rng.seed += recorder().rng_salt;
  const DType dt = qkv.dtype();
  Tensor out = Tensor::empty({d.B, d.T, d.C()}, Category::Activation, name, dt);
  const AttnFlops fl(d, p);
  const double flops = fl.forward();
  const int threads = omp_get_max_threads();
  const bool run = !shape_only();
  if (kind == AttentionKind::Naive) {
    Tensor probs = Tensor::empty({d.B, NH, d.T, d.T}, Category::Activation, name + ".probs", dt);
    {  // the workspace is made in a dry run too: it counts what a real run allocates
      Tensor ws = workspace(naive_ws(d, dt, threads), name + ".workspace");
      if (run)
        dispatch(dt, [&]<class S>() {
          kernels::Kernels<S>::attention_forward(span_of<S>(out), span_of<S>(probs), cspan_of<S>(qkv), d.B, d.T, NH,
                                                 KVH, HS, p, rng.seed, rng.offset, ws.span());
        });
    }
    if (!recording()) { count_forward(NaiveAttentionNode::kOp, name, flops); return out; }
    // Selective recomputation (Megatron-LM): the (B, NH, T, T) probabilities are rebuilt from the
    // saved qkv in backward -- QK^T, the causal mask and the softmax, nothing else: they are saved
    // pre-dropout (the backward regenerates the mask from (seed, offset)), and P V is not redone.
    offer_recipe(probs, {qkv}, [d, name, threads, dt](const Tensors& in) {
      Tensor pr = Tensor::empty({d.B, d.NH, d.T, d.T}, Category::Recompute, name + ".probs", dt);
      dispatch(dt, [&]<class S>() {
        using K = kernels::Kernels<S>;
        Tensor ws = workspace(K::probs_workspace(d.B, d.T, d.NH, d.KVH, d.HS, threads), name + ".workspace");
        if (!shape_only())
          K::probs_forward(span_of<S>(pr), cspan_of<S>(in[0]), d.B, d.T, d.NH, d.KVH, d.HS, ws.span());
      });
      return pr;
    }, fl.rebuild_probs());
    auto n = std::make_unique<NaiveAttentionNode>();
    n->name = name;
    n->outputs = {out.id()};
    n->flops_fwd = flops;
    n->flops_bwd = fl.naive_backward();
    n->s.qkv = save(*n, "qkv", qkv);
    n->s.probs = save(*n, "probs", probs);
    n->d = d;
    n->p = p;
    n->rng = rng;
    finish(std::move(n));
    return out;
  }
  Tensor lse = Tensor::empty({d.B, NH, d.T}, Category::Activation, name + ".lse");
  {
    Tensor ws = workspace(flash_ws(d, dt, threads), name + ".workspace");
    if (run)
      dispatch(dt, [&]<class S>() {
        kernels::Kernels<S>::flash_forward(span_of<S>(out), lse.span(), cspan_of<S>(qkv), d.B, d.T, NH, KVH, HS, p,
                                           rng.seed, rng.offset, ws.span());
      });
  }
  if (!recording()) { count_forward(FlashAttentionNode::kOp, name, flops); return out; }
  auto n = std::make_unique<FlashAttentionNode>();
  n->name = name;
  n->outputs = {out.id()};
  n->flops_fwd = flops;
  n->flops_bwd = fl.flash_backward();  // it recomputes QK^T tile by tile
  n->s.qkv = save(*n, "qkv", qkv);
  n->s.out = save(*n, "out", out);
  n->s.lse = save(*n, "lse", lse);
  n->d = d;
  n->p = p;
  n->rng = rng;
  finish(std::move(n));
  return out;
}

Tensor attention_cached(const Tensor& qkv, int64_t NH, int64_t KVH, const KVLayer& kv, int64_t pos,
                        const std::string& name) {
  REMAT_ASSERT(!recording(), "attention_cached is for generation, not under a tape");
  REMAT_ASSERT(qkv.shape().size() == 3 && qkv.dim(0) == 1 && NH > 0 && KVH > 0 && NH % KVH == 0 &&
                   qkv.dim(2) % (NH + 2 * KVH) == 0,
               "attention_cached: qkv must be (1, n, (NH + 2*KVH) * HS) with KVH dividing NH");
  const int64_t n = qkv.dim(1), HS = qkv.dim(2) / (NH + 2 * KVH);
  REMAT_ASSERT(kv.k.shape().size() == 2 && kv.k.dim(1) == KVH * HS && kv.v.shape() == kv.k.shape() &&
                   pos >= 0 && pos + n <= kv.k.dim(0),
               "attention_cached: the cache must be (capacity, KVH*HS) with room for the new positions");
  Tensor out = Tensor::empty({1, n, NH * HS}, Category::Activation, name, qkv.dtype());
  const int64_t threads = omp_get_max_threads();
  Tensor scratch = workspace(kernels::attention_decode_scratch_floats(pos + n, HS, threads), name + ".workspace");
  if (!shape_only())
    dispatch(qkv.dtype(), [&]<class S>() {
      Tensor k = kv.k, v = kv.v;  // handles on the cache's storage, written here
      kernels::attention_decode<S>(span_of<S>(out), k.span(), v.span(), cspan_of<S>(qkv), n, pos, NH, KVH, HS,
                                   scratch.span());
    });
  // Q K^T and P V over the positions so far: 2 * 2 * HS multiply-adds per (query, key, head).
  double pairs = 0;
  for (int64_t t = 0; t < n; ++t) pairs += double(pos + t + 1);
  count_forward("attention_cached", name, 4.0 * HS * NH * pairs);
  return out;
}

}  // namespace remat::autograd
