// Causal self-attention: the naive kernel (materialises (B, NH, T, T)) and its fused flash twin.
#include <omp.h>

#include <memory>

#include "autograd/ops.h"
#include "core/error.h"
#include "kernels/attention.h"
#include "kernels/flash_attention.h"

namespace remat::autograd {
namespace {

struct Dims {
  int64_t B, T, NH, KVH, HS;
  int64_t C() const { return NH * HS; }  // output channels
};

Tensor workspace(size_t floats, const std::string& name) {
  return Tensor::empty({int64_t(floats)}, Category::Workspace, name);
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
    Tensor ws = workspace(kernels::attention_workspace_floats(d.B, d.T, d.NH, d.KVH, d.HS, omp_get_max_threads()),
                          name + ".workspace");
    const Tensor qkv = s.qkv.get(), probs = s.probs.get();  // probs may be rebuilt here (selective)
    kernels::attention_backward(g.get(s.qkv.ref).span(), dout->cspan(), qkv.cspan(), probs.cspan(), d.B, d.T, d.NH,
                                d.KVH, d.HS, p, rng.seed, rng.offset, ws.span());
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
    Tensor ws = workspace(kernels::flash_attention_workspace_floats(d.B, d.T, d.NH, d.KVH, d.HS, omp_get_max_threads()),
                          name + ".workspace");
    const Tensor qkv = s.qkv.get(), out = s.out.get(), lse = s.lse.get();
    kernels::flash_attention_backward(g.get(s.qkv.ref).span(), dout->cspan(), qkv.cspan(), out.cspan(), lse.cspan(),
                                      d.B, d.T, d.NH, d.KVH, d.HS, p, rng.seed, rng.offset, ws.span());
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
  Tensor out = Tensor::empty({d.B, d.T, d.C()}, Category::Activation, name);
  // Causal: T(T+1)/2 score pairs per query head, 2 matmuls (QK^T, PV) of 2*HS flops each.
  const double pairs = double(d.T) * double(d.T + 1) / 2.0;
  const double flops = 4.0 * d.B * NH * pairs * HS;
  const int threads = omp_get_max_threads();
  const bool run = !shape_only();
  if (kind == AttentionKind::Naive) {
    Tensor probs = Tensor::empty({d.B, NH, d.T, d.T}, Category::Activation, name + ".probs");
    if (run) {
      Tensor ws = workspace(kernels::attention_workspace_floats(d.B, d.T, NH, KVH, HS, threads), name + ".workspace");
      kernels::attention_forward(out.span(), probs.span(), qkv.cspan(), d.B, d.T, NH, KVH, HS, p, rng.seed, rng.offset,
                                 ws.span());
    }
    if (!recording()) { count_forward(NaiveAttentionNode::kOp, name, flops); return out; }
    // Selective recomputation (Megatron-LM): the (B, NH, T, T) probabilities are rebuilt from the
    // saved qkv in backward -- QK^T and softmax again (the kernel also redoes P V into a scratch).
    offer_recipe(probs, {qkv}, [d, p, rng, name, threads](const Tensors& in) {
      Tensor pr = Tensor::empty({d.B, d.NH, d.T, d.T}, Category::Recompute, name + ".probs");
      Tensor scratch = Tensor::empty({d.B, d.T, d.C()}, Category::Workspace, name + ".scratch");
      Tensor ws = workspace(kernels::attention_workspace_floats(d.B, d.T, d.NH, d.KVH, d.HS, threads), name + ".workspace");
      kernels::attention_forward(scratch.span(), pr.span(), in[0].cspan(), d.B, d.T, d.NH, d.KVH, d.HS, p, rng.seed,
                                 rng.offset, ws.span());
      return pr;
    }, flops);
    auto n = std::make_unique<NaiveAttentionNode>();
    n->name = name;
    n->outputs = {out.id()};
    n->flops_fwd = flops;
    n->flops_bwd = 2 * flops;  // dP = dO V^T, dV = P^T dO, dQ, dK
    n->s.qkv = save(*n, "qkv", qkv);
    n->s.probs = save(*n, "probs", probs);
    n->d = d;
    n->p = p;
    n->rng = rng;
    finish(std::move(n));
    return out;
  }
  Tensor lse = Tensor::empty({d.B, NH, d.T}, Category::Activation, name + ".lse");
  if (run) {
    Tensor ws = workspace(kernels::flash_attention_workspace_floats(d.B, d.T, NH, KVH, HS, threads), name + ".workspace");
    kernels::flash_attention_forward(out.span(), lse.span(), qkv.cspan(), d.B, d.T, NH, KVH, HS, p, rng.seed, rng.offset,
                                     ws.span());
  }
  if (!recording()) { count_forward(FlashAttentionNode::kOp, name, flops); return out; }
  auto n = std::make_unique<FlashAttentionNode>();
  n->name = name;
  n->outputs = {out.id()};
  n->flops_fwd = flops;
  n->flops_bwd = 2.5 * flops;  // the backward recomputes QK^T tile by tile
  n->s.qkv = save(*n, "qkv", qkv);
  n->s.out = save(*n, "out", out);
  n->s.lse = save(*n, "lse", lse);
  n->d = d;
  n->p = p;
  n->rng = rng;
  finish(std::move(n));
  return out;
}

}  // namespace remat::autograd
