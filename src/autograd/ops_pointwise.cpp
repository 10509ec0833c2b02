// Layernorm, GELU, residual add and dropout.
#include <memory>

#include "autograd/dispatch.h"
#include "autograd/ops.h"
#include "core/error.h"
#include "kernels/attention_kernels.h"  // Kernels<S>::dropout_*
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/residual.h"

namespace remat::autograd {
namespace {

Shape rows_of(const Shape& s) { return Shape(s.begin(), s.end() - 1); }

struct LayerNormNode : Node {
  struct { Saved inp, mean, rstd; } s;
  Tensor w, b;
  int64_t N = 0, C = 0;
  static constexpr const char* kOp = "layernorm";
  const char* op() const override { return kOp; }
  void backward(GradTable& g) override {
    Tensor* dout = g.find_id(outputs[0]);
    const Tensor inp = s.inp.get(), mean = s.mean.get(), rstd = s.rstd.get();
    // Every gradient is created (a dry run counts them) before the kernel, which a dry run skips.
    Tensor &dinp = g.get(s.inp.ref), &dw = g.get(w), &db = g.get(b);
    if (shape_only()) return;
    dispatch_pair(inp.dtype(), dout->dtype(), [&]<class X, class Y>() {
      kernels::layernorm_backward<X, Y>(span_of<X>(dinp), dw.span(), db.span(), cspan_of<Y>(*dout), cspan_of<X>(inp),
                                        w.cspan(), mean.cspan(), rstd.cspan(), N, C);
    });
  }
};

struct GeluNode : Node {
  struct { Saved inp; } s;
  static constexpr const char* kOp = "gelu";
  const char* op() const override { return kOp; }
  void backward(GradTable& g) override {
    Tensor* dout = g.find_id(outputs[0]);
    const Tensor inp = s.inp.get();
    bool fresh = false;  // first gradient into inp: written, no zero fill
    Tensor& dinp = g.get_fresh(s.inp.ref, &fresh);
    if (shape_only()) return;
    dispatch(inp.dtype(), [&]<class S>() {
      kernels::gelu_backward<S>(span_of<S>(dinp), cspan_of<S>(inp), cspan_of<S>(*dout), inp.numel(), fresh);
    });
  }
};

struct AddNode : Node {
  Ref a, b;  // identities only: nothing is saved
  static constexpr const char* kOp = "add";
  const char* op() const override { return kOp; }
  void backward(GradTable& g) override {
    Tensor* dout = g.find_id(outputs[0]);
    // forward was: out = a + b, so da += dout, db += dout (a fresh gradient is a copy of dout: no zero
    // fill; get_fresh keeps references valid, and a == b takes the add the second time). dout is the
    // stream's dtype; a bf16 branch of an fp32 stream gets it rounded.
    const int64_t n = dout->numel();
    for (const Ref* r : {&a, &b}) {
      bool fresh = false;
      Tensor& d = g.get_fresh(*r, &fresh);
      if (shape_only()) continue;
      dispatch_pair(dout->dtype(), d.dtype(), [&]<class W, class N>() {
        if (fresh) kernels::assign<N, W>(span_of<N>(d), cspan_of<W>(*dout), n);
        else kernels::add_inplace<N, W>(span_of<N>(d), cspan_of<W>(*dout), n);
      });
    }
  }
};

struct DropoutNode : Node {
  Ref inp;  // identity only: the mask is regenerated from (seed, offset)
  float p = 0;
  Rng rng;
  static constexpr const char* kOp = "dropout";
  const char* op() const override { return kOp; }
  void backward(GradTable& g) override {
    Tensor* dout = g.find_id(outputs[0]);
    Tensor& dinp = g.get(inp);
    if (shape_only()) return;
    dispatch(dout->dtype(), [&]<class S>() {
      kernels::Kernels<S>::dropout_backward(span_of<S>(dinp), cspan_of<S>(*dout), dout->numel(), p, rng.seed, rng.offset);
    });
  }
};

}  // namespace

Tensor layernorm(const Tensor& x, const Tensor& w, const Tensor& b, const std::string& name, DType out_dtype) {
  const int64_t C = x.dim(-1), N = x.numel() / C;
  REMAT_ASSERT(!(x.is_bf16() && out_dtype == DType::F32), "layernorm: a bf16 input makes a bf16 output");
  Tensor out = Tensor::empty(x.shape(), Category::Activation, name, out_dtype);
  Tensor mean = Tensor::empty(rows_of(x.shape()), Category::Activation, name + ".mean");
  Tensor rstd = Tensor::empty(rows_of(x.shape()), Category::Activation, name + ".rstd");
  if (!shape_only())
    dispatch_pair(x.dtype(), out_dtype, [&]<class X, class Y>() {
      kernels::layernorm_forward<X, Y>(span_of<Y>(out), mean.span(), rstd.span(), cspan_of<X>(x), w.cspan(), b.cspan(),
                                       N, C);
    });
  const double flops = 8.0 * N * C;
  if (!recording()) { count_forward(LayerNormNode::kOp, name, flops); return out; }
  // Selective recomputation (policy `norms`): the output is rebuilt from the saved input, mean, rstd.
  offer_recipe(out, {x, mean, rstd, w, b}, [name, N, C, out_dtype](const Tensors& in) {
    Tensor o = Tensor::empty(in[0].shape(), Category::Recompute, name, out_dtype);
    if (!shape_only())
      dispatch_pair(in[0].dtype(), out_dtype, [&]<class X, class Y>() {
        kernels::layernorm_apply<X, Y>(span_of<Y>(o), cspan_of<X>(in[0]), in[3].cspan(), in[4].cspan(),
                                       in[1].cspan(), in[2].cspan(), N, C);
      });
    return o;
  }, flops);
  auto n = std::make_unique<LayerNormNode>();
  n->name = name;
  n->outputs = {out.id()};
  n->flops_fwd = flops;
  n->flops_bwd = 2 * flops;
  n->s.inp = save(*n, "inp", x);
  n->s.mean = save(*n, "mean", mean);
  n->s.rstd = save(*n, "rstd", rstd);
  n->w = w;
  n->b = b;
  n->N = N; n->C = C;
  finish(std::move(n));
  return out;
}

Tensor gelu(const Tensor& x, const std::string& name) {
  Tensor out = Tensor::empty(x.shape(), Category::Activation, name, x.dtype());
  if (!shape_only())
    dispatch(x.dtype(), [&]<class S>() { kernels::gelu_forward<S>(span_of<S>(out), cspan_of<S>(x), x.numel()); });
  const double flops = 10.0 * x.numel();
  if (!recording()) { count_forward(GeluNode::kOp, name, flops); return out; }
  // Selective recomputation (policy `gelu`, llm.c's recompute=1): rebuilt from the saved input.
  offer_recipe(out, {x}, [name](const Tensors& in) {
    Tensor o = Tensor::empty(in[0].shape(), Category::Recompute, name, in[0].dtype());
    if (!shape_only())
      dispatch(o.dtype(), [&]<class S>() { kernels::gelu_forward<S>(span_of<S>(o), cspan_of<S>(in[0]), o.numel()); });
    return o;
  }, flops);
  auto n = std::make_unique<GeluNode>();
  n->name = name;
  n->outputs = {out.id()};
  n->flops_fwd = flops;
  n->flops_bwd = 2 * flops;
  n->s.inp = save(*n, "inp", x);
  finish(std::move(n));
  return out;
}

Tensor add(const Tensor& a, const Tensor& b, const std::string& name) {
  REMAT_ASSERT(a.numel() == b.numel(), "add: shapes must match");
  REMAT_ASSERT(!(a.is_bf16() && !b.is_bf16()), "add: a bf16 stream takes a bf16 branch");
  Tensor out = Tensor::empty(a.shape(), Category::Activation, name, a.dtype());
  if (!shape_only())
    dispatch_pair(a.dtype(), b.dtype(), [&]<class S, class B>() {
      kernels::residual_forward<S, B>(span_of<S>(out), cspan_of<S>(a), cspan_of<B>(b), a.numel());
    });
  const double flops = double(a.numel());
  if (!recording()) { count_forward(AddNode::kOp, name, flops); return out; }
  auto n = std::make_unique<AddNode>();
  n->name = name;
  n->outputs = {out.id()};
  n->flops_fwd = flops;
  n->flops_bwd = 2 * flops;
  n->a = Ref::of(a);
  n->b = Ref::of(b);
  finish(std::move(n));
  return out;
}

Tensor dropout(const Tensor& x, float p, Rng rng, const std::string& name) {
  if (p == 0.0f) return x;
  rng.seed += recorder().rng_salt;
  Tensor out = Tensor::empty(x.shape(), Category::Activation, name, x.dtype());
  if (!shape_only())
    dispatch(x.dtype(), [&]<class S>() {
      kernels::Kernels<S>::dropout_forward(span_of<S>(out), cspan_of<S>(x), x.numel(), p, rng.seed, rng.offset);
    });
  const double flops = double(x.numel());
  if (!recording()) { count_forward(DropoutNode::kOp, name, flops); return out; }
  auto n = std::make_unique<DropoutNode>();
  n->name = name;
  n->outputs = {out.id()};
  n->flops_fwd = flops;
  n->flops_bwd = flops;
  n->inp = Ref::of(x);
  n->p = p;
  n->rng = rng;
  finish(std::move(n));
  return out;
}

}  // namespace remat::autograd
