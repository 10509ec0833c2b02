#include "autograd/tape.h"

#include <chrono>
#include <cstring>
#include <unordered_set>

#include "core/error.h"

namespace remat::autograd {

Tensor* GradTable::find_id(uint64_t id) {
  auto it = g_.find(id);
  return it == g_.end() ? nullptr : &it->second;
}

Tensor& GradTable::get(uint64_t id, const Shape& shape, const std::string& name, DType dtype) {
  auto it = g_.find(id);
  if (it != g_.end()) return it->second;
  return g_.emplace(id, Tensor::zeros(shape, Category::ActivationGrad, "d" + name, dtype)).first->second;
}

Tensor& GradTable::get_fresh(const Ref& r, bool* fresh) {
  auto it = g_.find(r.id);
  *fresh = it == g_.end();
  if (!*fresh) return it->second;
  return g_.emplace(r.id, Tensor::empty(r.shape, Category::ActivationGrad, "d" + r.name, r.dtype)).first->second;
}

void GradTable::bind(const Tensor& t, Tensor grad) { bind_id(t.id(), std::move(grad)); }
void GradTable::bind_id(uint64_t id, Tensor grad) { g_[id] = std::move(grad); }

Tensor GradTable::take(uint64_t id) {
  auto it = g_.find(id);
  if (it == g_.end()) return {};
  Tensor t = std::move(it->second);
  g_.erase(it);
  return t;
}

namespace {
double seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

void OpProfile::mark() { last = seconds(); }

std::string OpProfile::key(const std::string& name, const char* op) const {
  return (local ? local(name) : name) + " [" + op + "]";
}

void Tape::backward(GradTable& g) {
  Counters* c = recorder().counters;
  OpProfile* prof = recorder().profile;
  while (!nodes_.empty()) {
    std::unique_ptr<Node> n = std::move(nodes_.back());
    nodes_.pop_back();
    bool live = false;
    for (uint64_t id : n->outputs) live = live || g.find_id(id);
    if (live) {
      if (prof) {
        const double t0 = seconds();
        n->backward(g);
        auto& e = prof->ops[prof->key(n->name, n->op())];
        prof->last = seconds();
        e.bwd_s += prof->last - t0;
        e.bwd_flops += n->flops_bwd;
      } else {
        n->backward(g);
      }
      if (c) c->bwd_flops += n->flops_bwd;
    }
    for (uint64_t id : n->outputs) g.erase(id);
    // `n` dies here and releases what it saved.
  }
}

size_t Tape::saved_bytes() const {
  std::unordered_set<uint64_t> seen;
  size_t b = 0;
  for (const auto& n : nodes_)
    for (const auto& s : n->saved)
      if (s.tensor.defined() && seen.insert(s.tensor.id()).second) b += s.tensor.bytes();
  return b;
}

std::unordered_map<std::string, size_t> Tape::saved_by_name() const {
  std::unordered_set<uint64_t> seen;
  std::unordered_map<std::string, size_t> r;
  for (const auto& n : nodes_)
    for (const auto& s : n->saved)
      if (s.tensor.defined() && seen.insert(s.tensor.id()).second) r[s.tensor.name()] += s.tensor.bytes();
  return r;
}

std::unordered_map<std::string, size_t> Tape::saved_by_op() const {
  std::unordered_map<std::string, size_t> r;
  for (const auto& n : nodes_) {
    std::unordered_set<uint64_t> seen;
    for (const auto& s : n->saved)
      if (s.tensor.defined() && seen.insert(s.tensor.id()).second) r[n->name] += s.tensor.bytes();
  }
  return r;
}

Recorder& recorder() {
  thread_local Recorder r;
  return r;
}

namespace {
// `what_t` names t in the message: "recomputed tensor 'x' (op ..., slot ...)".
void verify_same(const std::string& what_t, const Tensor& t, const Tensor& orig) {
  auto fail = [&](const std::string& what) {
    throw Error("determinism", what_t + " " + what,
                "a recompute must replay the original forward exactly; dropout draws from Philox at (seed, offset), "
                "so check that the op's seed and offset do not depend on call order");
  };
  if (t.shape() != orig.shape()) fail("has shape " + shape_str(t.shape()) + ", the original had " + shape_str(orig.shape()));
  if (t.dtype() != orig.dtype())
    fail(std::string("is ") + dtype_name(t.dtype()) + ", the original was " + dtype_name(orig.dtype()));
  if (t.shape_only() || orig.shape_only()) return;  // a dry run: shapes only
  auto value = [](const Tensor& x, int64_t i) {
    return x.is_bf16() ? bf16_to_float(x.data_bf16()[i]) : x.data()[i];
  };
  const size_t es = dtype_size(t.dtype());
  const auto* a = static_cast<const unsigned char*>(t.is_bf16() ? static_cast<const void*>(t.data_bf16()) : t.data());
  const auto* b = static_cast<const unsigned char*>(orig.is_bf16() ? static_cast<const void*>(orig.data_bf16()) : orig.data());
  for (int64_t i = 0, N = t.numel(); i < N; ++i)
    if (std::memcmp(a + i * es, b + i * es, es) != 0)
      fail("differs from the original forward at index " + std::to_string(i) + ": " + std::to_string(value(t, i)) +
           " vs " + std::to_string(value(orig, i)));
}
}  // namespace

namespace {
struct Offer {
  Tensors inputs;
  std::function<Tensor(const Tensors&)> fn;
  double flops = 0;
};
std::unordered_map<uint64_t, Offer>& offers() {
  thread_local std::unordered_map<uint64_t, Offer> o;
  return o;
}
void keep(Node& n, const char* slot, const Tensor& t, Category cat) {
  if (t.category() == Category::Activation) const_cast<Tensor&>(t).retag(cat);
  n.saved.push_back({slot, t});
}
}  // namespace

void offer_recipe(const Tensor& out, Tensors inputs, std::function<Tensor(const Tensors&)> fn, double flops) {
  const Recorder& r = recorder();
  if (!r.policy || !r.tape) return;
  offers()[out.id()] = Offer{std::move(inputs), std::move(fn), flops};
}

void clear_recipes() { offers().clear(); }

Tensor Saved::get() const {
  if (t_.defined()) return t_;
  REMAT_ASSERT(recipe_ != nullptr, "Saved::get on an empty slot");
  Recorder r = recorder();
  r.tape = nullptr;  // a rebuild records nothing
  r.capture = nullptr;
  r.verify = nullptr;
  if (r.counters) r.counters->recompute_flops += recipe_->flops;
  RecordScope scope(r);
  Tensor t = recipe_->fn(recipe_->inputs);
  if (recipe_->original.defined()) verify_same("rebuilt tensor '" + recipe_->name + "' (selective recomputation)", t, recipe_->original);
  return t;
}

Saved save(Node& n, const char* slot, const Tensor& t) {
  Recorder& r = recorder();
  if (r.capture) r.capture->push_back(t.clone(Category::Debug, t.name()));
  if (r.verify) {
    if (r.verify_pos >= r.verify->size())
      throw Error("determinism", "recompute of " + n.name + " saved more tensors than the original forward");
    verify_same("recomputed tensor '" + t.name() + "' (op " + n.name + " [" + n.op() + "], slot " + slot + ")", t,
                (*r.verify)[r.verify_pos++]);
  }
  Saved s;
  s.ref = Ref::of(t);
  if (!r.tape) return s;
  if (r.policy && !r.policy->keep(t.name())) {
    auto it = offers().find(t.id());
    bool inputs_kept = it != offers().end();
    if (inputs_kept)
      for (const Tensor& u : it->second.inputs)
        inputs_kept = inputs_kept && (u.category() == Category::Parameter || r.policy->keep(u.name()) ||
                                      (!r.policy->strict() && offers().count(u.id()) == 0));
    if (inputs_kept) {
      auto rc = std::make_shared<Recipe>();
      rc->name = t.name();
      rc->inputs = it->second.inputs;
      rc->fn = it->second.fn;
      rc->flops = it->second.flops;
      if (r.check_determinism) rc->original = t.clone(Category::Debug, t.name());
      for (const Tensor& u : rc->inputs)
        if (u.category() != Category::Parameter) keep(n, "recipe", u, r.save_category);
      Dropped d{slot, t.name(), t.shape(), t.bytes(), {}, rc->flops};
      for (const Tensor& u : rc->inputs) d.from.push_back(u.name());
      n.dropped.push_back(std::move(d));
      s.recipe_ = std::move(rc);
      return s;
    }
    if (r.policy->strict())
      throw Error("policy", "cannot drop '" + t.name() + "': no op rebuilds it from tensors that are kept",
                  r.policy->drop_hint() + "; the rest is recomputed by a segment strategy such as --recompute block");
  }
  keep(n, slot, t, r.save_category);
  s.t_ = t;
  return s;
}

void finish(std::unique_ptr<Node> n) {
  Recorder& r = recorder();
  count_forward(n->op(), n->name, n->flops_fwd);
  if (r.tape) r.tape->push(std::move(n));
}

void count_forward(const char* op, const std::string& name, double flops) {
  Recorder& r = recorder();
  if (r.profile) {
    const double t = seconds();
    auto& e = r.profile->ops[r.profile->key(name, op)];
    (r.recompute ? e.rec_s : e.fwd_s) += t - r.profile->last;
    (r.recompute ? e.rec_flops : e.fwd_flops) += flops;
    if (!r.recompute) ++e.calls;
    r.profile->last = t;
  }
  if (!r.counters) return;
  (r.recompute ? r.counters->recompute_flops : r.counters->fwd_flops) += flops;
}

}  // namespace remat::autograd
