// The ops LLaMA adds: RMSNorm, the SwiGLU gate and rotary embeddings packed into qkv.
#include <memory>

#include "autograd/dispatch.h"
#include "autograd/ops.h"
#include "core/error.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"

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
    dispatch_pair(inp.dtype(), dout->dtype(), [&]<class X, class Y>() {
      kernels::rmsnorm_backward<X, Y>(span_of<X>(dinp), dw.span(), cspan_of<Y>(*dout), cspan_of<X>(inp), w.cspan(),
                                      rstd.cspan(), N, C);
    });
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
    dispatch(gate.dtype(), [&]<class S>() {
      kernels::swiglu_backward<S>(span_of<S>(dgate), span_of<S>(dup), cspan_of<S>(*dout), cspan_of<S>(gate),
                                  cspan_of<S>(up), n);
    });
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
    dispatch(dqkv->dtype(), [&]<class S>() {
      kernels::rope_qkv_backward<S>(span_of<S>(dq), span_of<S>(dk), span_of<S>(dv), cspan_of<S>(*dqkv), cos.cspan(),
                                    sin.cspan(), B, T, NH, KVH, HS);
    });
  }
};

}  // namespace

Tensor rmsnorm(const Tensor& x, const Tensor& w, float eps, const std::string& name, DType out_dtype) {
  const int64_t C = x.dim(-1), N = x.numel() / C;
  REMAT_ASSERT(w.numel() == C, "rmsnorm: weight must have the input's last dimension");
  REMAT_ASSERT(!(x.is_bf16() && out_dtype == DType::F32), "rmsnorm: a bf16 input makes a bf16 output");
  Tensor out = Tensor::empty(x.shape(), Category::Activation, name, out_dtype);
  Tensor rstd = Tensor::empty(rows_of(x.shape()), Category::Activation, name + ".rstd");
  if (!shape_only())
    dispatch_pair(x.dtype(), out_dtype, [&]<class X, class Y>() {
      kernels::rmsnorm_forward<X, Y>(span_of<Y>(out), rstd.span(), cspan_of<X>(x), w.cspan(), N, C, eps);
    });
  const double flops = 4.0 * N * C;
  if (!recording()) { count_forward(RMSNormNode::kOp, name, flops); return out; }
  // Selective recomputation (policy `norms`): the output is rebuilt from the saved input and rstd.
  offer_recipe(out, {x, rstd, w}, [name, N, C, out_dtype](const Tensors& in) {
    Tensor o = Tensor::empty(in[0].shape(), Category::Recompute, name, out_dtype);
    if (!shape_only())
      dispatch_pair(in[0].dtype(), out_dtype, [&]<class X, class Y>() {
        kernels::rmsnorm_apply<X, Y>(span_of<Y>(o), cspan_of<X>(in[0]), in[2].cspan(), in[1].cspan(), N, C);
      });
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
  if (!shape_only())
    dispatch(gate.dtype(), [&]<class S>() {
      kernels::swiglu_forward<S>(span_of<S>(out), cspan_of<S>(gate), cspan_of<S>(up), n);
    });
  const double flops = 8.0 * n;  // exp, add, divide, two multiplies (counted as a sigmoid's usual 8)
  if (!recording()) { count_forward(SwiGLUNode::kOp, name, flops); return out; }
  // Selective recomputation (policy `swiglu`): the gated product is rebuilt from gate and up.
  offer_recipe(out, {gate, up}, [name, n](const Tensors& in) {
    Tensor o = Tensor::empty(in[0].shape(), Category::Recompute, name, in[0].dtype());
    if (!shape_only())
      dispatch(o.dtype(), [&]<class S>() {
        kernels::swiglu_forward<S>(span_of<S>(o), cspan_of<S>(in[0]), cspan_of<S>(in[1]), n);
      });
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
                const std::string& name, int64_t pos0) {
  const int64_t B = q.dim(0), T = q.dim(1), HS = q.dim(2) / NH;
  REMAT_ASSERT(q.shape().size() == 3 && q.dim(2) == NH * HS && k.shape() == Shape({B, T, KVH * HS}) &&
                   v.shape() == k.shape() && HS % 2 == 0,
               "rope_qkv: q must be (B, T, NH*HS), k and v (B, T, KVH*HS), with HS even");
  REMAT_ASSERT(k.dtype() == q.dtype() && v.dtype() == q.dtype(), "rope_qkv: q, k and v must have the same dtype");
  REMAT_ASSERT(pos0 == 0 || !recording(), "rope_qkv: positions after 0 are for generation, not under a tape");
  Tensor out = Tensor::empty({B, T, (NH + 2 * KVH) * HS}, Category::Activation, name, q.dtype());
  {  // the tables are made in a dry run too: it counts what a real run allocates
    Tensor cos = Tensor::empty({pos0 + T, HS / 2}, Category::Workspace, name + ".cos");
    Tensor sin = Tensor::empty({pos0 + T, HS / 2}, Category::Workspace, name + ".sin");
    if (!shape_only()) {
      kernels::rope_table(cos.span(), sin.span(), pos0 + T, HS, theta);
      const size_t skip = size_t(pos0 * (HS / 2));  // rows 0 .. pos0-1: the positions before these tokens
      dispatch(q.dtype(), [&]<class S>() {
        kernels::rope_qkv_forward<S>(span_of<S>(out), cspan_of<S>(q), cspan_of<S>(k), cspan_of<S>(v),
                                     cos.cspan().subspan(skip), sin.cspan().subspan(skip), B, T, NH, KVH, HS);
      });
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
