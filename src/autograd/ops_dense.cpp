// Linear layers (Conv1D layout and the tied head) and the token+position embedding.
#include <memory>

#include "autograd/dispatch.h"
#include "autograd/ops.h"
#include "core/error.h"
#include "kernels/encoder.h"
#include "kernels/matmul.h"

namespace remat::autograd {
namespace {

Shape with_last(const Shape& s, int64_t last) {
  Shape r = s;
  r.back() = last;
  return r;
}

struct LinearNode : Node {
  struct { Saved inp; } s;
  Tensor w, b;  // parameters: not activations, never counted
  int64_t N = 0, C = 0, OC = 0;
  static constexpr const char* kOp = "linear";
  const char* op() const override { return kOp; }
  void backward(GradTable& g) override {
    Tensor* dout = g.find_id(outputs[0]);
    // forward was: out = inp @ w + b, so dinp += dout @ w^T, dw += inp^T @ dout, db += sum(dout)
    const Tensor inp = s.inp.get();
    bool fresh = false;  // first gradient into inp: written by the GEMM, no zero fill
    Tensor& dinp = g.get_fresh(s.inp.ref, &fresh);
    Tensor& dw = g.get(w);
    std::span<float> db = b.defined() ? g.get(b).span() : std::span<float>{};
    // In a dry run too (bf16 counts oneDNN's scratchpad). dw: the master's fp32 gradient, bound to the
    // bf16 copy's id under bf16.
    dispatch(inp.dtype(), [&]<class S>() {
      kernels::matmul_backward<S>(span_of<S>(dinp), dw.span(), db, cspan_of<S>(*dout), cspan_of<S>(inp),
                                  cspan_of<S>(w), N, C, OC, fresh);
    });
  }
};

struct LinearNTNode : Node {
  struct { Saved inp; } s;
  Tensor w;
  int64_t N = 0, C = 0, OC = 0;
  static constexpr const char* kOp = "linear_nt";
  const char* op() const override { return kOp; }
  void backward(GradTable& g) override {
    Tensor* dout = g.find_id(outputs[0]);
    // forward was: out = inp @ w^T, so dinp += dout @ w, dw += dout^T @ inp
    const Tensor inp = s.inp.get();
    bool fresh = false;
    Tensor& dinp = g.get_fresh(s.inp.ref, &fresh);
    Tensor& dw = g.get(w);
    dispatch(inp.dtype(), [&]<class S>() {  // in a dry run too (bf16 counts oneDNN's scratchpad)
      kernels::matmul_nt_backward<S>(span_of<S>(dinp), dw.span(), cspan_of<S>(*dout), cspan_of<S>(inp),
                                     cspan_of<S>(w), N, C, OC, fresh);
    });
  }
};

struct EmbeddingNode : Node {
  std::span<const int32_t> tokens;  // the batch, owned by the caller for the whole step
  Tensor wte, wpe;
  int64_t B = 0, T = 0, C = 0;
  static constexpr const char* kOp = "embedding";
  const char* op() const override { return kOp; }
  void backward(GradTable& g) override {
    Tensor* dout = g.find_id(outputs[0]);
    // forward was: out[b,t] = wte[tok] + wpe[t], so dwte[tok] += dout[b,t], dwpe[t] += dout[b,t]
    Tensor& dwte = g.get(wte);
    const std::span<float> dwpe = wpe.defined() ? g.get(wpe).span() : std::span<float>{};
    if (shape_only()) return;
    dispatch(dout->dtype(), [&]<class S>() {
      kernels::encoder_backward<S>(dwte.span(), dwpe, cspan_of<S>(*dout), tokens.data(), B, T, C);
    });
  }
};

}  // namespace

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b, const std::string& name) {
  const int64_t C = x.dim(-1), OC = w.dim(1), N = x.numel() / C;
  REMAT_ASSERT(w.dim(0) == C, "linear: weight must be (in, out)");
  REMAT_ASSERT(w.dtype() == x.dtype(), "linear: the weight's dtype must be the input's (the bf16 copy under bf16)");
  Tensor out = Tensor::empty(with_last(x.shape(), OC), Category::Activation, name, x.dtype());
  const std::span<const float> bias = b.defined() ? b.cspan() : std::span<const float>{};
  dispatch(x.dtype(), [&]<class S>() {  // in a dry run too (bf16 counts oneDNN's scratchpad)
    kernels::matmul_forward<S>(span_of<S>(out), cspan_of<S>(x), cspan_of<S>(w), bias, N, C, OC);
  });
  const double flops = 2.0 * N * C * OC;
  if (!recording()) { count_forward(LinearNode::kOp, name, flops); return out; }
  auto n = std::make_unique<LinearNode>();
  n->name = name;
  n->outputs = {out.id()};
  n->flops_fwd = flops;
  n->flops_bwd = 2 * flops;
  n->s.inp = save(*n, "inp", x);
  n->w = w;
  n->b = b;
  n->N = N; n->C = C; n->OC = OC;
  finish(std::move(n));
  return out;
}

Tensor linear_nt(const Tensor& x, const Tensor& w, const std::string& name) {
  const int64_t C = x.dim(-1), OC = w.dim(0), N = x.numel() / C;
  REMAT_ASSERT(w.dim(1) == C, "linear_nt: weight must be (out, in)");
  REMAT_ASSERT(w.dtype() == x.dtype(), "linear_nt: the weight's dtype must be the input's (the bf16 copy under bf16)");
  Tensor out = Tensor::empty(with_last(x.shape(), OC), Category::Activation, name, x.dtype());
  dispatch(x.dtype(), [&]<class S>() {  // in a dry run too (bf16 counts oneDNN's scratchpad)
    kernels::matmul_nt_forward<S>(span_of<S>(out), cspan_of<S>(x), cspan_of<S>(w), N, C, OC);
  });
  const double flops = 2.0 * N * C * OC;
  if (!recording()) { count_forward(LinearNTNode::kOp, name, flops); return out; }
  auto n = std::make_unique<LinearNTNode>();
  n->name = name;
  n->outputs = {out.id()};
  n->flops_fwd = flops;
  n->flops_bwd = 2 * flops;
  n->s.inp = save(*n, "inp", x);
  n->w = w;
  n->N = N; n->C = C; n->OC = OC;
  finish(std::move(n));
  return out;
}

Tensor embedding(std::span<const int32_t> tokens, const Tensor& wte, const Tensor& wpe, int64_t B, int64_t T,
                 const std::string& name, DType out_dtype) {
  const int64_t C = wte.dim(1);
  // shape_only() first: a dry run of an absurd --batch/--seq must reach Tensor::empty's overflow
  // check below, not overflow B * T here (UBSan).
  REMAT_ASSERT(shape_only() || int64_t(tokens.size()) == B * T, "embedding: token count must be B*T");
  Tensor out = Tensor::empty({B, T, C}, Category::Activation, name, out_dtype);
  const std::span<const float> pos = wpe.defined() ? wpe.cspan() : std::span<const float>{};
  if (!shape_only())
    dispatch(out_dtype, [&]<class S>() {
      kernels::encoder_forward<S>(span_of<S>(out), tokens.data(), wte.cspan(), pos, B, T, C);
    });
  const double flops = wpe.defined() ? double(B) * T * C : 0.0;  // the position add
  if (!recording()) { count_forward(EmbeddingNode::kOp, name, flops); return out; }
  auto n = std::make_unique<EmbeddingNode>();
  n->name = name;
  n->outputs = {out.id()};
  n->flops_fwd = flops;
  n->flops_bwd = wpe.defined() ? 2 * flops : double(B) * T * C;
  n->tokens = tokens;
  n->wte = wte;
  n->wpe = wpe;
  n->B = B; n->T = T; n->C = C;
  finish(std::move(n));
  return out;
}

}  // namespace remat::autograd
