#include "train/step.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace remat {

using autograd::GradTable;
using autograd::Recorder;
using autograd::RecordScope;
using autograd::Tape;

void StepMeasure::merge(const StepMeasure& o) {
  counters.fwd_flops += o.counters.fwd_flops;
  counters.recompute_flops += o.counters.recompute_flops;
  counters.bwd_flops += o.counters.bwd_flops;
  counters.block_forwards += o.counters.block_forwards;
  counters.block_recomputes += o.counters.block_recomputes;
  counters.block_backwards += o.counters.block_backwards;
  for (int c = 0; c < kNumCategories; ++c) peak_category[size_t(c)] = std::max(peak_category[size_t(c)], o.peak_category[size_t(c)]);
  peak_activation = std::max(peak_activation, o.peak_activation);
  peak_saved = std::max(peak_saved, o.peak_saved);
  peak_checkpoint = std::max(peak_checkpoint, o.peak_checkpoint);
  peak_recompute = std::max(peak_recompute, o.peak_recompute);
  peak_total = std::max(peak_total, o.peak_total);
  forward_end = std::max(forward_end, o.forward_end);
  chain_forward_s += o.chain_forward_s;
}

float forward_backward(Model& model, const MicroBatch& mb, double count, const StepRng& rng, const StepOptions& opt,
                       StepMeasure* measure) {
  Allocator& alloc = accountant();  // a dry run's, under DryRunAccount
  alloc.reset_peak();
  StepMeasure m;
  auto trace = [&](const std::string& s) { if (opt.trace) opt.trace(s); };

  GradTable g;
  for (Param& p : model.params()) g.bind(p.value, p.grad);

  Tape emb_tape, head_tape;
  Recorder r;
  r.counters = &m.counters;
  r.check_determinism = opt.check_determinism;
  r.policy = opt.policy;
  r.profile = opt.profile;
  if (r.profile) r.profile->mark();

  Tensor x0;
  {
    r.tape = &emb_tape;
    RecordScope scope(r);
    x0 = model.embed(mb.inputs, mb.B, mb.T, rng);
    autograd::clear_recipes();
  }
  trace("forward   embedding");
  const uint64_t x0_id = x0.id();

  Chain chain{int(model.config().L), [&](int i, const Tensor& x) { return model.block(i, x, rng); }};
  ExecutorOptions eo;
  eo.check_determinism = opt.check_determinism;
  eo.break_replay = opt.break_replay;
  eo.policy = opt.policy;
  eo.block_policy = opt.block_policy;
  if (opt.trace) eo.on_action = [&](const Action& a) { opt.trace(describe(a)); };
  ChainExecutor ex(chain, opt.schedule, eo, &m.counters);
  Tensor xL;
  {
    r.tape = nullptr;
    RecordScope scope(r);
    const auto t0 = std::chrono::steady_clock::now();
    xL = ex.forward(x0);
    m.chain_forward_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  x0 = Tensor();  // held by block 0's tape or as checkpoint x0, as the schedule says
  const uint64_t xL_id = xL.id();

  float loss_value = 0;
  {
    r.tape = &head_tape;
    RecordScope scope(r);
    Tensor logits = model.logits(xL);
    xL = Tensor();
    Tensor loss = model.loss(logits, mb.targets, count);
    autograd::clear_recipes();
    loss_value = shape_only() ? 0.0f : float(double(loss.data()[0]) * count / double(mb.B * mb.T));
    trace("forward   head (final norm, LM head, loss)");
    m.forward_end = alloc.active_activation();
    Tensor dloss = Tensor::empty({1}, Category::ActivationGrad, "dloss");
    if (!shape_only()) dloss.data()[0] = 1.0f;
    g.bind(loss, dloss);
  }
  {
    RecordScope scope(r);
    head_tape.backward(g);
  }
  trace("backward  head");
  Tensor dxL = g.take(xL_id);
  Tensor dx0;
  {
    r.tape = nullptr;
    RecordScope scope(r);
    dx0 = ex.backward(g, std::move(dxL));
  }
  if (dx0.defined()) g.bind_id(x0_id, std::move(dx0));
  {
    RecordScope scope(r);
    emb_tape.backward(g);
  }
  trace("backward  embedding");

  m.peak_activation = alloc.peak_activation();
  m.peak_saved = alloc.peak(Category::SavedActivation);
  m.peak_checkpoint = alloc.peak(Category::Checkpoint);
  m.peak_recompute = alloc.peak(Category::Recompute);
  m.peak_total = alloc.peak_total();
  for (int c = 0; c < kNumCategories; ++c) m.peak_category[size_t(c)] = alloc.peak(Category(c));
  if (measure) measure->merge(m);
  return loss_value;
}

StepMemory dry_run_step(const ModelConfig& cfg, int64_t B, int64_t T, int64_t accum, const StepOptions& opt,
                        size_t data_bytes) {
  Allocator acct;
  StepMeasure m;
  {
    ShapeOnlyScope dry;
    DryRunAccount count(acct);
    const std::unique_ptr<Model> model = make_model(cfg);  // parameters and gradients
    std::vector<Tensor> moments;                           // AdamW's m and v, as the trainer makes them
    for (const Param& p : model->params()) {
      moments.push_back(Tensor::zeros(p.value.shape(), Category::OptimizerState, p.name + ".adam_m"));
      moments.push_back(Tensor::zeros(p.value.shape(), Category::OptimizerState, p.name + ".adam_v"));
    }
    if (data_bytes > 0) acct.account(data_bytes, Category::Data, "data");
    const std::vector<int32_t> none;
    for (int64_t k = 0; k < accum; ++k)
      forward_backward(*model, MicroBatch{none, none, B, T}, double(B * T * accum), StepRng{0, true}, opt, &m);
    if (data_bytes > 0) acct.unaccount(data_bytes, Category::Data, "data");
  }
  StepMemory r;
  r.peak = m.peak_category;
  r.peak_total = m.peak_total;
  r.peak_activation = m.peak_activation;
  for (Category c : {Category::Parameter, Category::Gradient, Category::OptimizerState, Category::Data})
    r.persistent += r.peak[size_t(c)];
  return r;
}

float evaluate_loss(const Model& model, const MicroBatch& mb) {
  Recorder r;  // no tape: nothing saved
  RecordScope scope(r);
  StepRng none{0, false};
  ModelConfig cfg = model.config();
  Tensor x = model.embed(mb.inputs, mb.B, mb.T, none);
  for (int i = 0; i < cfg.L; ++i) x = model.block(i, x, none);
  Tensor logits = model.logits(x);
  Tensor loss = model.loss(logits, mb.targets, double(mb.B * mb.T));
  return loss.data()[0];
}

}  // namespace remat
