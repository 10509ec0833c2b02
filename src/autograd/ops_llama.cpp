// The ops LLaMA adds: RMSNorm, the SwiGLU gate and rotary embeddings packed into qkv.
#include <memory>

#include "autograd/ops.h"
#include "core/error.h"
#include "kernels/rmsnorm.h"
#include "kernels/rmsnorm_bf16.h"
#include "kernels/rope.h"
#include "kernels/rope_bf16.h"
#include "kernels/swiglu.h"
#include "kernels/swiglu_bf16.h"

namespace remat::autograd {
namespace {

Shape rows_of(const Shape& s) { return Shape(s.begin(), s.end() - 1); }

struct RMSNormNode : Node {
  struct { Saved inp, rstd; } s;
  Tensor w;
  int64_t N = 0, C = 0;
  static constexpr const char* kOp = "rmsnorm";
  const char* op() const override { return kOp; }
  void backward(GradTable& g) override {
    Tensor* dout = g.find_id(outputs[0]);
    const Tensor inp = s.inp.get(), rstd = s.rstd.get();
    Tensor &dinp = g.get(s.inp.ref), &dw = g.get(w);
    if (shape_only()) return;
    if (!dout->is_bf16())
      kernels::rmsnorm_backward(dinp.span(), dw.span(), dout->cspan(), inp.cspan(), w.cspan(), rstd.cspan(), N, C);
    else if (inp.is_bf16())
      kernels::rmsnorm_bf16_backward(dinp.bspan(), dw.span(), dout->cbspan(), inp.cbspan(), w.cspan(), rstd.cspan(), N, C);
    else  // an fp32 residual stream into a bf16 block
      kernels::rmsnorm_mixed_backward(dinp.span(), dw.span(), dout->cbspan(), inp.cspan(), w.cspan(), rstd.cspan(), N, C);
  }
};

struct SwiGLUNode : Node {
  struct { Saved gate, up; } s;
  int64_t n = 0;
  static constexpr const char* kOp = "swiglu";
  const char* op() const override { return kOp; }
  void backward(GradTable& g) override {
    Tensor* dout = g.find_id(outputs[0]);
    const Tensor gate = s.gate.get(), up = s.up.get();
    Tensor& dgate = g.get(s.gate.ref);
    Tensor& dup = g.get(s.up.ref);
    if (shape_only()) return;
    if (gate.is_bf16())
      kernels::swiglu_bf16_backward(dgate.bspan(), dup.bspan(), dout->cbspan(), gate.cbspan(), up.cbspan(), n);
    else
      kernels::swiglu_backward(dgate.span(), dup.span(), dout->cspan(), gate.cspan(), up.cspan(), n);
  }
};

struct RopeNode : Node {
  Ref q, k, v;  // identities only: the rotation needs no saved values
  int64_t B = 0, T = 0, NH = 0, KVH = 0, HS = 0;
  float theta = 0;
  static constexpr const char* kOp = "rope";
  const char* op() const override { return kOp; }
  void backward(GradTable& g) override {
    Tensor* dqkv = g.find_id(outputs[0]);
    Tensor cos = Tensor::empty({T, HS / 2}, Category::Workspace, name + ".cos");
    Tensor sin = Tensor::empty({T, HS / 2}, Category::Workspace, name + ".sin");
    if (!shape_only()) kernels::rope_table(cos.span(), sin.span(), T, HS, theta);
    Tensor& dq = g.get(q);
    Tensor& dk = g.get(k);
    Tensor& dv = g.get(v);
    if (shape_only()) return;
    if (dqkv->is_bf16())
      kernels::rope_qkv_bf16_backward(dq.bspan(), dk.bspan(), dv.bspan(), dqkv->cbspan(), cos.cspan(), sin.cspan(), B, T,
                                      NH, KVH, HS);
    else
      kernels::rope_qkv_backward(dq.span(), dk.span(), dv.span(), dqkv->cspan(), cos.cspan(), sin.cspan(), B, T, NH,
                                 KVH, HS);
  }
};

}  // namespace

namespace {
// out = rmsnorm(x) with x's rstd given: fp32 -> fp32, bf16 -> bf16, or fp32 -> bf16.
void rmsnorm_apply_any(Tensor& o, const Tensor& x, const Tensor& w, const Tensor& rstd, int64_t N, int64_t C) {
  if (!o.is_bf16()) kernels::rmsnorm_apply(o.span(), x.cspan(), w.cspan(), rstd.cspan(), N, C);
  else if (x.is_bf16()) kernels::rmsnorm_bf16_apply(o.bspan(), x.cbspan(), w.cspan(), rstd.cspan(), N, C);
  else kernels::rmsnorm_mixed_apply(o.bspan(), x.cspan(), w.cspan(), rstd.cspan(), N, C);
}
void swiglu_forward_any(Tensor& o, const Tensor& gate, const Tensor& up, int64_t n) {
  if (gate.is_bf16()) kernels::swiglu_bf16_forward(o.bspan(), gate.cbspan(), up.cbspan(), n);
  else kernels::swiglu_forward(o.span(), gate.cspan(), up.cspan(), n);
}
}  // namespace

Tensor rmsnorm(const Tensor& x, const Tensor& w, float eps, const std::string& name, DType out_dtype) {
  const int64_t C = x.dim(-1), N = x.numel() / C;
  REMAT_ASSERT(w.numel() == C, "rmsnorm: weight must have the input's last dimension");
  REMAT_ASSERT(!(x.is_bf16() && out_dtype == DType::F32), "rmsnorm: a bf16 input makes a bf16 output");
  Tensor out = Tensor::empty(x.shape(), Category::Activation, name, out_dtype);
  Tensor rstd = Tensor::empty(rows_of(x.shape()), Category::Activation, name + ".rstd");
  if (shape_only()) {
  } else if (!out.is_bf16()) {
    kernels::rmsnorm_forward(out.span(), rstd.span(), x.cspan(), w.cspan(), N, C, eps);
  } else if (x.is_bf16()) {
    kernels::rmsnorm_bf16_forward(out.bspan(), rstd.span(), x.cbspan(), w.cspan(), N, C, eps);
  } else {
    kernels::rmsnorm_mixed_forward(out.bspan(), rstd.span(), x.cspan(), w.cspan(), N, C, eps);
  }
  const double flops = 4.0 * N * C;
  if (!recording()) { count_forward(RMSNormNode::kOp, name, flops); return out; }
  // Selective recomputation (policy `norms`): the output is rebuilt from the saved input and rstd.
  offer_recipe(out, {x, rstd, w}, [name, N, C, out_dtype](const Tensors& in) {
    Tensor o = Tensor::empty(in[0].shape(), Category::Recompute, name, out_dtype);
    if (!shape_only()) rmsnorm_apply_any(o, in[0], in[2], in[1], N, C);
    return o;
  }, 2.0 * N * C);
  auto n = std::make_unique<RMSNormNode>();
  n->name = name;
  n->outputs = {out.id()};
  n->flops_fwd = flops;
  n->flops_bwd = 2 * flops;
  n->s.inp = save(*n, "inp", x);
  n->s.rstd = save(*n, "rstd", rstd);
  n->w = w;
  n->N = N; n->C = C;
  finish(std::move(n));
  return out;
}

Tensor swiglu(const Tensor& gate, const Tensor& up, const std::string& name) {
  REMAT_ASSERT(gate.shape() == up.shape(), "swiglu: gate and up must have the same shape");
  const int64_t n = gate.numel();
  REMAT_ASSERT(gate.dtype() == up.dtype(), "swiglu: gate and up must have the same dtype");
  Tensor out = Tensor::empty(gate.shape(), Category::Activation, name, gate.dtype());
  if (!shape_only()) swiglu_forward_any(out, gate, up, n);
  const double flops = 8.0 * n;  // exp, add, divide, two multiplies (counted as a sigmoid's usual 8)
  if (!recording()) { count_forward(SwiGLUNode::kOp, name, flops); return out; }
  // Selective recomputation (policy `swiglu`): the gated product is rebuilt from gate and up.
  offer_recipe(out, {gate, up}, [name, n](const Tensors& in) {
    Tensor o = Tensor::empty(in[0].shape(), Category::Recompute, name, in[0].dtype());
    if (!shape_only()) swiglu_forward_any(o, in[0], in[1], n);
    return o;
  }, flops);
  auto nd = std::make_unique<SwiGLUNode>();
  nd->name = name;
  nd->outputs = {out.id()};
  nd->flops_fwd = flops;
  nd->flops_bwd = 2 * flops;
  nd->s.gate = save(*nd, "gate", gate);
  nd->s.up = save(*nd, "up", up);
  nd->n = n;
  finish(std::move(nd));
  return out;
}

Tensor rope_qkv(const Tensor& q, const Tensor& k, const Tensor& v, int64_t NH, int64_t KVH, float theta,
                const std::string& name) {
  const int64_t B = q.dim(0), T = q.dim(1), HS = q.dim(2) / NH;
  REMAT_ASSERT(q.shape().size() == 3 && q.dim(2) == NH * HS && k.shape() == Shape({B, T, KVH * HS}) &&
                   v.shape() == k.shape() && HS % 2 == 0,
               "rope_qkv: q must be (B, T, NH*HS), k and v (B, T, KVH*HS), with HS even");
  REMAT_ASSERT(k.dtype() == q.dtype() && v.dtype() == q.dtype(), "rope_qkv: q, k and v must have the same dtype");
  Tensor out = Tensor::empty({B, T, (NH + 2 * KVH) * HS}, Category::Activation, name, q.dtype());
  {  // the tables are made in a dry run too: it counts what a real run allocates
    Tensor cos = Tensor::empty({T, HS / 2}, Category::Workspace, name + ".cos");
    Tensor sin = Tensor::empty({T, HS / 2}, Category::Workspace, name + ".sin");
    if (!shape_only()) {
      kernels::rope_table(cos.span(), sin.span(), T, HS, theta);
      if (q.is_bf16())
        kernels::rope_qkv_bf16_forward(out.bspan(), q.cbspan(), k.cbspan(), v.cbspan(), cos.cspan(), sin.cspan(), B, T,
                                       NH, KVH, HS);
      else
        kernels::rope_qkv_forward(out.span(), q.cspan(), k.cspan(), v.cspan(), cos.cspan(), sin.cspan(), B, T, NH, KVH,
                                  HS);
    }
  }
  const double flops = 3.0 * B * T * (NH + KVH) * HS;  // two multiplies and an add per rotated element
  if (!recording()) { count_forward(RopeNode::kOp, name, flops); return out; }
  auto n = std::make_unique<RopeNode>();
  n->name = name;
  n->outputs = {out.id()};
  n->flops_fwd = flops;
  n->flops_bwd = flops;
  n->q = Ref::of(q);
  n->k = Ref::of(k);
  n->v = Ref::of(v);
  n->B = B; n->T = T; n->NH = NH; n->KVH = KVH; n->HS = HS;
  n->theta = theta;
  finish(std::move(n));
  return out;
}

}  // namespace remat::autograd
