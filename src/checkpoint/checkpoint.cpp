#include "checkpoint/checkpoint.h"

#include <memory>

#include "checkpoint/replay.h"
#include "core/error.h"

namespace remat {
namespace {

using autograd::GradTable;
using autograd::Ref;

// A region on the tape. Its first pass and its replay run through run_pass (checkpoint/replay.h),
// as the chain executor's blocks do: one determinism check, one --debug-break-replay.
struct CheckpointNode : autograd::Node {
  RegionFn fn;
  Tensors inputs;                 // the only activations the region keeps
  std::vector<Ref> outs;          // the original outputs (identities)
  Pass replay;                    // how the backward replays it (policy, checks)
  std::vector<Tensor> captured;   // --determinism-check: the first pass's would-be saves
  const char* op() const override { return "checkpoint"; }

  void backward(GradTable& g) override {
    autograd::Tape local;
    Pass p = replay;
    p.tape = &local;
    Tensors replayed = run_pass(p, "region '" + name + "'", [&] { return fn(inputs); });
    REMAT_ASSERT(replayed.size() == outs.size(), "checkpoint: replay returned a different number of outputs");
    for (size_t k = 0; k < outs.size(); ++k) {
      Tensor gk = g.take(outs[k].id);
      if (gk.defined()) g.bind(replayed[k], std::move(gk));
    }
    replayed.clear();  // the local tape holds what backward needs
    local.backward(g);
  }
};

}  // namespace

Tensors checkpoint(RegionFn fn, const Tensors& inputs, const autograd::Policy* policy) {
  if (!autograd::recording()) return fn(inputs);
  auto n = std::make_unique<CheckpointNode>();
  n->name = "checkpoint";
  const autograd::Recorder& outer = autograd::recorder();
  // The first pass keeps nothing; it is a recompute when the region runs inside a replay.
  Pass first;
  first.recompute = outer.recompute;
  first.policy = outer.policy;
  first.captured = &n->captured;
  first.check_determinism = outer.check_determinism;
  first.break_replay = outer.break_replay;
  Tensors outputs = run_pass(first, "region '" + n->name + "'", [&] { return fn(inputs); });
  for (const Tensor& x : inputs) {
    if (x.category() == Category::Activation) const_cast<Tensor&>(x).retag(Category::Checkpoint);
    n->saved.push_back({"input", x});
  }
  n->replay.recompute = true;
  n->replay.policy = policy;
  n->replay.captured = &n->captured;
  n->replay.check_determinism = outer.check_determinism;
  n->replay.break_replay = outer.break_replay;
  n->fn = std::move(fn);
  n->inputs = inputs;
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
