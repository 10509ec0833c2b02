#include "checkpoint/checkpoint.h"

#include <memory>

#include "core/error.h"

namespace remat {
namespace {

using autograd::GradTable;
using autograd::Recorder;
using autograd::RecordScope;
using autograd::Ref;

struct CheckpointNode : autograd::Node {
  RegionFn fn;
  Tensors inputs;                 // the only activations the region keeps
  std::vector<Ref> outs;          // the original outputs (identities)
  const autograd::Policy* policy = nullptr;
  std::vector<Tensor> captured;   // --determinism-check: the original forward's saves
  const char* op() const override { return "checkpoint"; }

  void backward(GradTable& g) override {
    autograd::Tape local;
    Recorder r = autograd::recorder();
    r.tape = &local;
    r.save_category = Category::Recompute;
    r.recompute = true;
    r.policy = policy;
    r.capture = nullptr;
    r.verify = check_ ? &captured : nullptr;
    r.verify_pos = 0;
    Tensors replayed;
    {
      RecordScope scope(r);
      replayed = fn(inputs);
      autograd::clear_recipes();
      if (check_ && autograd::recorder().verify_pos != captured.size())
        throw Error("determinism", "replay of region '" + name + "' saved fewer tensors than its original forward");
    }
    REMAT_ASSERT(replayed.size() == outs.size(), "checkpoint: replay returned a different number of outputs");
    captured.clear();
    for (size_t k = 0; k < outs.size(); ++k) {
      Tensor gk = g.take(outs[k].id);
      if (gk.defined()) g.bind(replayed[k], std::move(gk));
    }
    replayed.clear();  // the local tape holds what backward needs
    local.backward(g);
  }
  bool check_ = false;
};

}  // namespace

Tensors checkpoint(RegionFn fn, const Tensors& inputs, const autograd::Policy* policy) {
  if (!autograd::recording()) return fn(inputs);
  auto n = std::make_unique<CheckpointNode>();
  n->name = "checkpoint";
  const Recorder& outer = autograd::recorder();
  n->check_ = outer.check_determinism;
  Recorder r = outer;
  r.tape = nullptr;
  r.capture = n->check_ ? &n->captured : nullptr;
  r.verify = nullptr;
  Tensors outputs;
  {
    RecordScope scope(r);
    outputs = fn(inputs);
  }
  for (const Tensor& x : inputs) {
    if (x.category() == Category::Activation) const_cast<Tensor&>(x).retag(Category::Checkpoint);
    n->saved.push_back({"input", x});
  }
  n->fn = std::move(fn);
  n->inputs = inputs;
  n->policy = policy;
  for (const Tensor& y : outputs) {
    n->outs.push_back(Ref::of(y));
    n->outputs.push_back(y.id());
  }
  autograd::finish(std::move(n));
  return outputs;
}

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& x) {
  return checkpoint([fn](const Tensors& in) { return Tensors{fn(in[0])}; }, Tensors{x})[0];
}

}  // namespace remat
