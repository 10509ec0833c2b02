// Layernorm, GELU, residual add and dropout.
#include <memory>

#include "autograd/ops.h"
#include "core/error.h"
#include "kernels/bf16.h"
#include "kernels/dropout.h"
#include "kernels/dropout_bf16.h"
#include "kernels/gelu.h"
#include "kernels/gelu_bf16.h"
#include "kernels/layernorm.h"
#include "kernels/layernorm_bf16.h"
#include "kernels/residual.h"
#include "kernels/residual_bf16.h"

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
    if (!dout->is_bf16())
      kernels::layernorm_backward(dinp.span(), dw.span(), db.span(), dout->cspan(), inp.cspan(), w.cspan(),
                                  mean.cspan(), rstd.cspan(), N, C);
    else if (inp.is_bf16())
      kernels::layernorm_bf16_backward(dinp.bspan(), dw.span(), db.span(), dout->cbspan(), inp.cbspan(), w.cspan(),
                                       mean.cspan(), rstd.cspan(), N, C);
    else  // an fp32 residual stream into a bf16 block
      kernels::layernorm_mixed_backward(dinp.span(), dw.span(), db.span(), dout->cbspan(), inp.cspan(), w.cspan(),
                                        mean.cspan(), rstd.cspan(), N, C);
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
    if (inp.is_bf16()) kernels::gelu_bf16_backward(dinp.bspan(), inp.cbspan(), dout->cbspan(), inp.numel(), fresh);
    else kernels::gelu_backward(dinp.span(), inp.cspan(), dout->cspan(), inp.numel(), fresh);
  }
};

struct AddNode : Node {
  Ref a, b;  // identities only: nothing is saved
  static constexpr const char* kOp = "add";
  const char* op() const override { return kOp; }
  void backward(GradTable& g) override {
    Tensor* dout = g.find_id(outputs[0]);
    // forward was: out = a + b, so da += dout, db += dout (a fresh gradient is a copy of dout: no zero
    // fill; get_fresh keeps references valid, and a == b takes the add the second time)
    const int64_t n = dout->numel();
    for (const Ref* r : {&a, &b}) {
      bool fresh = false;
      Tensor& d = g.get_fresh(*r, &fresh);
      if (shape_only()) continue;
      if (d.dtype() == dout->dtype()) {
        if (d.is_bf16()) {
          if (fresh) kernels::assign_bf16(d.bspan(), dout->cbspan(), n);
          else kernels::add_inplace_bf16(d.bspan(), dout->cbspan(), n);
        } else {
          if (fresh) kernels::assign(d.span(), dout->cspan(), n);
          else kernels::add_inplace(d.span(), dout->cspan(), n);
        }
      } else if (fresh) {  // the bf16 branch of an fp32 stream: its gradient is the stream's, rounded
        kernels::to_bf16_parallel(d.data_bf16(), dout->data(), n);
      } else {  // never in remat's models (a branch has one consumer); correct, if slow
        bf16* dd = d.data_bf16();
        const float* src = dout->data();
        for (int64_t i = 0; i < n; ++i) dd[i] = float_to_bf16(bf16_to_float(dd[i]) + src[i]);
      }
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
    if (dout->is_bf16())
      kernels::dropout_bf16_backward(dinp.bspan(), dout->cbspan(), dout->numel(), p, rng.seed, rng.offset);
    else
      kernels::dropout_backward(dinp.span(), dout->cspan(), dout->numel(), p, rng.seed, rng.offset);
  }
};

}  // namespace

namespace {
// out = layernorm(x) with x's statistics given: fp32 -> fp32, bf16 -> bf16, or fp32 -> bf16.
void layernorm_apply_any(Tensor& o, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& mean,
                         const Tensor& rstd, int64_t N, int64_t C) {
  if (!o.is_bf16())
    kernels::layernorm_apply(o.span(), x.cspan(), w.cspan(), b.cspan(), mean.cspan(), rstd.cspan(), N, C);
  else if (x.is_bf16())
    kernels::layernorm_bf16_apply(o.bspan(), x.cbspan(), w.cspan(), b.cspan(), mean.cspan(), rstd.cspan(), N, C);
  else
    kernels::layernorm_mixed_apply(o.bspan(), x.cspan(), w.cspan(), b.cspan(), mean.cspan(), rstd.cspan(), N, C);
}
}  // namespace

Tensor layernorm(const Tensor& x, const Tensor& w, const Tensor& b, const std::string& name, DType out_dtype) {
  const int64_t C = x.dim(-1), N = x.numel() / C;
  REMAT_ASSERT(!(x.is_bf16() && out_dtype == DType::F32), "layernorm: a bf16 input makes a bf16 output");
  Tensor out = Tensor::empty(x.shape(), Category::Activation, name, out_dtype);
  Tensor mean = Tensor::empty(rows_of(x.shape()), Category::Activation, name + ".mean");
  Tensor rstd = Tensor::empty(rows_of(x.shape()), Category::Activation, name + ".rstd");
  if (shape_only()) {
  } else if (!out.is_bf16()) {
    kernels::layernorm_forward(out.span(), mean.span(), rstd.span(), x.cspan(), w.cspan(), b.cspan(), N, C);
  } else if (x.is_bf16()) {
    kernels::layernorm_bf16_forward(out.bspan(), mean.span(), rstd.span(), x.cbspan(), w.cspan(), b.cspan(), N, C);
  } else {
    kernels::layernorm_mixed_forward(out.bspan(), mean.span(), rstd.span(), x.cspan(), w.cspan(), b.cspan(), N, C);
  }
  const double flops = 8.0 * N * C;
  if (!recording()) { count_forward(LayerNormNode::kOp, name, flops); return out; }
  // Selective recomputation (policy `norms`): the output is rebuilt from the saved input, mean, rstd.
  offer_recipe(out, {x, mean, rstd, w, b}, [name, N, C, out_dtype](const Tensors& in) {
    Tensor o = Tensor::empty(in[0].shape(), Category::Recompute, name, out_dtype);
    if (!shape_only()) layernorm_apply_any(o, in[0], in[3], in[4], in[1], in[2], N, C);
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

namespace {
void gelu_forward_any(Tensor& out, const Tensor& x) {
  if (x.is_bf16()) kernels::gelu_bf16_forward(out.bspan(), x.cbspan(), x.numel());
  else kernels::gelu_forward(out.span(), x.cspan(), x.numel());
}
}  // namespace

Tensor gelu(const Tensor& x, const std::string& name) {
  Tensor out = Tensor::empty(x.shape(), Category::Activation, name, x.dtype());
  if (!shape_only()) gelu_forward_any(out, x);
  const double flops = 10.0 * x.numel();
  if (!recording()) { count_forward(GeluNode::kOp, name, flops); return out; }
  // Selective recomputation (policy `gelu`, llm.c's recompute=1): rebuilt from the saved input.
  offer_recipe(out, {x}, [name](const Tensors& in) {
    Tensor o = Tensor::empty(in[0].shape(), Category::Recompute, name, in[0].dtype());
    if (!shape_only()) gelu_forward_any(o, in[0]);
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
  if (shape_only()) {
  } else if (a.is_bf16()) {
    kernels::residual_bf16_forward(out.bspan(), a.cbspan(), b.cbspan(), a.numel());
  } else if (b.is_bf16()) {
    kernels::residual_mixed_forward(out.span(), a.cspan(), b.cbspan(), a.numel());
  } else {
    kernels::residual_forward(out.span(), a.cspan(), b.cspan(), a.numel());
  }
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
  if (shape_only()) {
  } else if (x.is_bf16()) {
    kernels::dropout_bf16_forward(out.bspan(), x.cbspan(), x.numel(), p, rng.seed, rng.offset);
  } else {
    kernels::dropout_forward(out.span(), x.cspan(), x.numel(), p, rng.seed, rng.offset);
  }
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
