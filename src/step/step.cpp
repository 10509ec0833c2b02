#include "step/step.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.h"
#include "kernels/adamw.h"

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
  for (int c = 0; c < kNumCategories; ++c) {
    peak_category[size_t(c)] = std::max(peak_category[size_t(c)], o.peak_category[size_t(c)]);
    for (int d = 0; d < kNumDTypes; ++d)
      peak_category_by_dtype[size_t(c)][size_t(d)] =
          std::max(peak_category_by_dtype[size_t(c)][size_t(d)], o.peak_category_by_dtype[size_t(c)][size_t(d)]);
  }
  if (o.peak_activation > peak_activation) peak_activation_by_dtype = o.peak_activation_by_dtype;
  peak_activation = std::max(peak_activation, o.peak_activation);
  peak_saved = std::max(peak_saved, o.peak_saved);
  peak_checkpoint = std::max(peak_checkpoint, o.peak_checkpoint);
  peak_recompute = std::max(peak_recompute, o.peak_recompute);
  peak_total = std::max(peak_total, o.peak_total);
  forward_end = std::max(forward_end, o.forward_end);
  chain_forward_s += o.chain_forward_s;
  if (!whole_step) whole_step = o.whole_step;
  if (!untracked_heap) untracked_heap = o.untracked_heap;
}

void StepMeasure::take_peaks(const Allocator& a) {
  peak_activation = a.peak_activation();
  for (int d = 0; d < kNumDTypes; ++d) peak_activation_by_dtype[size_t(d)] = a.peak_activation(DType(d));
  peak_saved = a.peak(Category::SavedActivation);
  peak_checkpoint = a.peak(Category::Checkpoint);
  peak_recompute = a.peak(Category::Recompute);
  peak_total = a.peak_total();
  for (int c = 0; c < kNumCategories; ++c) {
    peak_category[size_t(c)] = a.peak(Category(c));
    for (int d = 0; d < kNumDTypes; ++d) peak_category_by_dtype[size_t(c)][size_t(d)] = a.peak(Category(c), DType(d));
  }
}

float forward_backward(Model& model, const MicroBatch& mb, double count, const StepRng& rng, const StepOptions& opt,
                       StepMeasure* measure) {
  Allocator& alloc = accountant();  // a dry run's, under DryRunAccount
  alloc.reset_peak();
  StepMeasure m;
  auto trace = [&](const std::string& s) { if (opt.trace) opt.trace(s); };

  GradTable g;
  for (Param& p : model.params()) {
    g.bind(p.value, p.grad);
    if (p.lowp.defined()) g.bind(p.lowp, p.grad);  // the matmuls' bf16 copy: its gradient is the master's
  }

  Tape emb_tape, head_tape;
  Recorder r;
  r.counters = &m.counters;
  r.check_determinism = opt.check_determinism;
  r.break_replay = opt.break_replay;
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

  const int L = int(model.config().L);
  if (!opt.block_attention.empty() && opt.block_attention.size() != size_t(L))
    throw Error("step", "the plan gives " + std::to_string(opt.block_attention.size()) + " attention kernels for " +
                            std::to_string(L) + " blocks",
                "give one kernel per block, or none");
  Chain chain{L, [&](int i, const Tensor& x) {
                return model.block(i, x, rng,
                                   opt.block_attention.empty() ? model.config().attention : opt.block_attention[size_t(i)]);
              }};
  ExecutorOptions eo;
  eo.check_determinism = opt.check_determinism;
  eo.break_replay = opt.break_replay;
  eo.policy = opt.policy;
  eo.block_policy = opt.block_policy;
  if (opt.trace || opt.after_action)
    eo.on_action = [&](const Action& a) {
      if (opt.trace) opt.trace(describe(a));
      if (opt.after_action) opt.after_action(a);
    };
  eo.before_action = opt.before_action;
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

  m.take_peaks(alloc);
  if (measure) measure->merge(m);
  return loss_value;
}

namespace {
// What the trainer holds across steps (trainer.cpp), in its order: the model's parameters and
// gradients, the data set, AdamW's moments and the batch buffers. Made under a ShapeOnlyScope and a
// DryRunAccount: counted by `acct`, no memory.
struct DryState {
  DryState(const ModelConfig& cfg, int64_t B, int64_t T, size_t data_bytes, Allocator& acct, Shard shard = {})
      : model(make_model(cfg)), acct_(acct), data_bytes_(data_bytes) {
    if (data_bytes_ > 0) acct_.account(data_bytes_, Category::Data, "data.tokens");
    make_adamw_moments(*model, &adam_m, &adam_v, shard);
    batch = std::make_unique<BatchBuffers>(B, T);
  }
  ~DryState() {
    if (data_bytes_ > 0) acct_.unaccount(data_bytes_, Category::Data, "data.tokens");
  }
  DryState(const DryState&) = delete;
  DryState& operator=(const DryState&) = delete;
  std::unique_ptr<Model> model;
  std::vector<Tensor> adam_m, adam_v;
  std::unique_ptr<BatchBuffers> batch;

 private:
  Allocator& acct_;
  size_t data_bytes_;
};
}  // namespace

StepMemory dry_run_step(const ModelConfig& cfg, int64_t B, int64_t T, int64_t accum, const StepOptions& opt,
                        size_t data_bytes) {
  Allocator acct(/*track_names=*/false);  // peaks and counts only
  StepMeasure m;
  StepMemory r;
  {
    ShapeOnlyScope dry;
    DryRunAccount count(acct);
    DryState st(cfg, B, T, data_bytes, acct, opt.optimizer_shard);
    // Data parallelism's buffers and hooks, counted as the trainer's are.
    const std::unique_ptr<StepExtension> ext = opt.make_extension ? opt.make_extension(*st.model) : nullptr;
    StepOptions so = opt;
    if (ext) {
      so.before_action = [&](const Action& a) {
        if (opt.before_action) opt.before_action(a);
        ext->before_action(a);
      };
      so.after_action = [&](const Action& a) {
        if (opt.after_action) opt.after_action(a);
        ext->after_action(a);
      };
    }
    // Trainer::step: every micro-batch's forward_backward, the gradient norm and the AdamW update.
    const uint64_t n0 = acct.allocations(), b0 = acct.allocated_bytes();
    if (ext) ext->before_step(opt.schedule);
    for (int64_t k = 0; k < accum; ++k) {
      forward_backward(*st.model, st.batch->micro_batch(), double(B * T * accum), StepRng{0, true}, so, &m);
      if (ext) ext->after_micro_batch();
    }
    if (ext) ext->after_backward();
    adamw_step(*st.model, st.adam_m, st.adam_v, AdamWSettings{}, grad_norm(*st.model), 0.0f, 1, opt.optimizer_shard,
               ext ? ext->parameter_chunks() : nullptr);
    if (ext) ext->after_update();
    StepMeasure last;  // the optimizer's part, with the last micro-batch's (peaks since its reset)
    last.take_peaks(acct);
    m.merge(last);
    r.allocations = acct.allocations() - n0;
    r.allocated_bytes = acct.allocated_bytes() - b0;
  }
  r.peak = m.peak_category;
  r.peak_by_dtype = m.peak_category_by_dtype;
  r.peak_total = m.peak_total;
  r.peak_activation = m.peak_activation;
  r.peak_activation_by_dtype = m.peak_activation_by_dtype;
  for (Category c : {Category::Parameter, Category::Gradient, Category::OptimizerState, Category::Data})
    r.persistent += r.peak[size_t(c)];
  return r;
}

size_t plan_independent_bytes(const ModelConfig& cfg, int64_t B, int64_t T, size_t data_bytes) {
  Allocator acct(/*track_names=*/false);  // peaks and counts only
  ShapeOnlyScope dry;
  DryRunAccount count(acct);
  const DryState st(cfg, B, T, data_bytes, acct);
  return acct.active_total();
}

size_t BatchBuffers::bytes(int64_t B, int64_t T) {
  return size_t(shape_numel({2, B, T})) * sizeof(int32_t);  // throws on a (B, T) too large to address
}

BatchBuffers::BatchBuffers(int64_t B, int64_t T) : B_(B), T_(T), n_(bytes(B, T) / 2 / sizeof(int32_t)) {
  if (shape_only()) {
    dry_ = &accountant();
    dry_->account(bytes(B, T), Category::Data, "data.batch");
  } else {
    data_ = static_cast<int32_t*>(Allocator::global().allocate(bytes(B, T), Category::Data, "data.batch"));
  }
}

BatchBuffers::~BatchBuffers() {
  if (dry_) dry_->unaccount(bytes(B_, T_), Category::Data, "data.batch");
  else Allocator::global().release(data_, bytes(B_, T_), Category::Data, "data.batch");
}

MicroBatch BatchBuffers::micro_batch() const {
  if (!data_) return MicroBatch{{}, {}, B_, T_};
  return MicroBatch{{data_, n_}, {data_ + n_, n_}, B_, T_};
}

void make_adamw_moments(const Model& model, std::vector<Tensor>* m, std::vector<Tensor>* v, Shard shard) {
  for (const Param& p : model.params()) {
    const int64_t n = p.value.numel();
    const Shape shape = shard.whole() ? p.value.shape() : Shape{shard.hi(n) - shard.lo(n)};
    m->push_back(Tensor::zeros(shape, Category::OptimizerState, p.name + ".adam_m"));
    v->push_back(Tensor::zeros(shape, Category::OptimizerState, p.name + ".adam_v"));
  }
}

std::vector<Param> make_parameter_chunks(const Model& model, Shard shard) {
  std::vector<Param> out;
  for (const Param& q : model.params()) {
    const int64_t n = q.value.numel(), len = shard.hi(n) - shard.lo(n);
    Param c;
    c.name = q.name;
    c.value = Tensor::empty({len}, Category::Parameter, q.name + ".chunk");
    c.grad = Tensor::zeros({len}, Category::Gradient, q.name + ".grad_chunk");
    if (q.lowp.defined()) c.lowp = Tensor::empty({len}, Category::Parameter, q.name + ".bf16_chunk", DType::BF16);
    out.push_back(std::move(c));
  }
  return out;
}

double grad_norm(const Model& model) {
  double sq = 0;
  for (const Param& p : model.params())
    if (!p.grad.shape_only()) sq += kernels::sum_squares(p.grad.cspan());
  return std::sqrt(sq);
}

void adamw_step(Model& model, std::vector<Tensor>& m, std::vector<Tensor>& v, const AdamWSettings& s, double norm,
                float lr, int64_t t, Shard shard, std::vector<Param>* chunks) {
  auto& params = model.params();
  REMAT_ASSERT(m.size() == params.size() && v.size() == params.size(), "adamw_step: one moment per parameter");
  REMAT_ASSERT(!chunks || (chunks->size() == params.size() && !shard.whole()), "adamw_step: one chunk per parameter");
  for (size_t i = 0; i < params.size(); ++i) {
    const Param& p = params[i];
    Param& at = chunks ? (*chunks)[i] : params[i];  // where the shard's elements live
    if (at.value.shape_only()) continue;  // a dry run: the update allocates nothing
    const int64_t n = p.value.numel(), lo = shard.lo(n), len = shard.hi(n) - lo, from = chunks ? 0 : lo;
    REMAT_ASSERT(m[i].numel() == len && v[i].numel() == len, "adamw_step: moments of another shard");
    const std::span<float> grad = at.grad.span().subspan(size_t(from), size_t(len));
    if (s.clip > 0 && norm > s.clip) kernels::scale_inplace(grad, float(s.clip / norm));
    // GPT-2 and LLaMA practice: no weight decay on biases and norm gains (1-D tensors).
    const float wd = p.value.shape().size() >= 2 ? s.weight_decay : 0.0f;
    // The matmuls' bf16 copy (--precision bf16) follows its updated master, in the same pass.
    kernels::adamw_update(at.value.span().subspan(size_t(from), size_t(len)), grad, m[i].span(), v[i].span(), len, lr,
                          s.beta1, s.beta2, s.eps, wd, t, at.lowp.defined() ? at.lowp.data_bf16() + from : nullptr);
  }
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
  return loss.data()[0];  // fp32 in every precision
}

std::vector<NamePolicy> named_block_policies(const Model& model, const std::vector<std::string>& names) {
  std::vector<NamePolicy> owned;
  owned.reserve(names.size());
  for (const std::string& n : names) owned.push_back(model.policy(n));
  return owned;
}

std::vector<const autograd::Policy*> policy_pointers(const std::vector<NamePolicy>& owned) {
  std::vector<const autograd::Policy*> out;
  out.reserve(owned.size());
  for (const NamePolicy& p : owned) out.push_back(p.keeps_all() ? nullptr : &p);
  return out;
}

}  // namespace remat
