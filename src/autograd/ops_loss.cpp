// Softmax cross-entropy over the LM-head logits.
#include <memory>
#include <vector>

#include "autograd/dispatch.h"
#include "autograd/ops.h"
#include "core/error.h"
#include "kernels/crossentropy.h"

namespace remat::autograd {
namespace {

// dlogits (+)= d(losses)/d(logits), in the logits' dtype.
void write_dlogits(Tensor& dlogits, const Tensor& dlosses, const Tensor& logits, const Tensor& lse,
                           const int32_t* targets, int64_t N, int64_t V, bool overwrite) {
  dispatch(logits.dtype(), [&]<class S>() {
    kernels::crossentropy_backward<S>(span_of<S>(dlogits), dlosses.cspan(), cspan_of<S>(logits), lse.cspan(), targets,
                                      N, V, overwrite);
  });
}

struct CrossEntropyNode : Node {
  struct { Saved logits, lse; } s;
  std::span<const int32_t> targets;  // the batch, owned by the caller for the whole step
  double count = 1;
  int64_t N = 0, V = 0;
  static constexpr const char* kOp = "cross_entropy";
  const char* op() const override { return kOp; }
  void backward(GradTable& g) override {
    Tensor* dloss = g.find_id(outputs[0]);
    // forward was: loss = sum_i losses_i / count, so dlosses_i = dloss / count
    Tensor dlosses = Tensor::empty({N}, Category::Workspace, name + ".dlosses");
    if (!shape_only()) dlosses.fill(float(double(dloss->data()[0]) / count));
    const Tensor lse = s.lse.get();
    const Ref ref = s.logits.ref;
    // This backward is the logits' last reader: the node gives up its hold on them (both the slot and
    // the accounting entry) before the kernel runs, so `logits` is the only handle this node has left.
    Tensor logits = s.logits.get();
    s.logits = Saved{};
    std::erase_if(saved, [&](const SavedSlot& x) { return x.tensor.id() == logits.id(); });
    const bool run = !shape_only();
    if (Tensor* acc = g.find_id(ref.id)) {
      // Something else already put a gradient into the logits: add to it.
      if (run) write_dlogits(*acc, dlosses, logits, lse, targets.data(), N, V, false);
    } else if (logits.use_count() == 1) {
      // Nobody else holds the logits (not the caller, not another node): the (B, T, V) gradient is
      // written over them in place, and the buffer changes hands from saved activation to gradient.
      // No second (B, T, V) buffer, no zero fill; the same bits as accumulating into zeros.
      logits.retag(Category::ActivationGrad);
      if (run) write_dlogits(logits, dlosses, logits, lse, targets.data(), N, V, /*overwrite=*/true);
      g.bind_id(ref.id, std::move(logits));
    } else {
      // Still held elsewhere: a fresh gradient, written (not zero-filled, then added to).
      bool fresh = false;
      Tensor& d = g.get_fresh(ref, &fresh);
      if (run) write_dlogits(d, dlosses, logits, lse, targets.data(), N, V, /*overwrite=*/true);
    }
  }
};

}  // namespace

Tensor cross_entropy(const Tensor& logits, std::span<const int32_t> targets, double count, const std::string& name) {
  const int64_t V = logits.dim(-1), N = logits.numel() / V;
  REMAT_ASSERT(int64_t(targets.size()) == N || shape_only(), "cross_entropy: one target per row");
  Tensor lse = Tensor::empty({N}, Category::Activation, name + ".lse");
  Tensor loss = Tensor::empty({1}, Category::Activation, name);
  {  // the per-row losses are made in a dry run too: it counts what a real run allocates
    Tensor losses = Tensor::empty({N}, Category::Workspace, name + ".losses");
    if (!shape_only()) {
      dispatch(logits.dtype(), [&]<class S>() {
        kernels::crossentropy_forward<S>(losses.span(), lse.span(), cspan_of<S>(logits), targets.data(), N, V);
      });
      double sum = 0;  // fixed order: deterministic
      for (int64_t i = 0; i < N; ++i) sum += losses.data()[i];
      loss.data()[0] = float(sum / count);
    }
  }
  const double flops = 4.0 * N * V;
  if (!recording()) { count_forward(CrossEntropyNode::kOp, name, flops); return loss; }
  auto n = std::make_unique<CrossEntropyNode>();
  n->name = name;
  n->outputs = {loss.id()};
  n->flops_fwd = flops;
  n->flops_bwd = flops;
  n->s.logits = save(*n, "logits", logits);
  n->s.lse = save(*n, "lse", lse);
  n->targets = targets;
  n->count = count;
  n->N = N; n->V = V;
  finish(std::move(n));
  return loss;
}

}  // namespace remat::autograd
