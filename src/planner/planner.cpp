#include "planner/planner.h"

#include <algorithm>
#include <array>
#include <map>
#include <unordered_map>

#include "core/error.h"
#include "autograd/tape.h"

namespace remat::planner {

size_t PartTrace::kept_bytes() const {
  size_t b = 0;
  for (const TensorRecord& t : kept) b += t.bytes;
  return b;
}
size_t PartTrace::input_bytes() const {
  for (const TensorRecord& t : kept)
    if (t.input) return t.bytes;
  return 0;
}
double PartTrace::fwd_flops() const {
  double f = 0;
  for (const OpRecord& o : ops) f += o.fwd_flops;
  return f;
}
double PartTrace::bwd_flops() const {
  double f = 0;
  for (const OpRecord& o : ops) f += o.bwd_flops;
  return f;
}
double PartTrace::rebuild_flops() const {
  double f = 0;
  for (const OpRecord& o : ops) f += o.rebuild_flops;
  return f;
}

namespace {

// Reads one recorded tape into a PartTrace. `input` is the part's input (undefined for the embedding).
PartTrace read_tape(std::string name, const autograd::Tape& tape, const Tensor& input, const Tensor& output) {
  PartTrace p;
  p.name = std::move(name);
  std::unordered_map<uint64_t, size_t> index;  // storage id -> position in p.kept
  std::map<std::string, size_t> dropped;       // tensor name -> position in p.dropped
  const auto& nodes = tape.nodes();
  for (size_t k = 0; k < nodes.size(); ++k) {
    const autograd::Node& n = *nodes[k];
    OpRecord op{n.name, n.op(), n.flops_fwd, n.flops_bwd, 0};
    for (const autograd::SavedSlot& s : n.saved) {
      const Tensor& t = s.tensor;
      if (!t.defined()) continue;
      if (output.defined() && t.id() == output.id())
        throw Error("planner", "'" + t.name() + "' is both the output of " + p.name + " and saved by one of its ops",
                    "the memory simulation assumes a block does not save its own output; restructure the block");
      auto [it, fresh] = index.emplace(t.id(), p.kept.size());
      if (fresh) p.kept.push_back({t.name(), t.shape(), t.bytes(), {}, input.defined() && t.id() == input.id(), t.category(), {}, 0});
      std::vector<int>& h = p.kept[it->second].holders;
      if (h.empty() || h.back() != int(k)) h.push_back(int(k));
    }
    for (const autograd::Dropped& d : n.dropped) {
      op.rebuild_flops += d.flops;
      auto [it, fresh] = dropped.emplace(d.name, p.dropped.size());
      if (fresh) p.dropped.push_back({d.name, d.shape, d.bytes, {}, false, Category::Recompute, d.from, d.flops});
      p.dropped[it->second].holders.push_back(int(k));
    }
    p.ops.push_back(std::move(op));
  }
  return p;
}

}  // namespace

std::unique_ptr<Model> shape_only_model(const ModelConfig& cfg) {
  ShapeOnlyScope dry;
  return make_model(cfg);
}

StepTrace trace_step(const Model& model, int64_t B, int64_t T, const autograd::Policy* policy,
                     const std::vector<autograd::AttentionKind>& block_attention) {
  ShapeOnlyScope dry;
  StepTrace st;
  st.cfg = model.config();
  if (!block_attention.empty()) {
    REMAT_ASSERT(block_attention.size() == size_t(model.num_layers()), "trace_step: one attention kernel per block");
    if (std::all_of(block_attention.begin(), block_attention.end(),
                    [&](autograd::AttentionKind k) { return k == block_attention.front(); }))
      st.cfg.attention = block_attention.front();  // the trace's model, as it ran
  }
  st.B = B;
  st.T = T;
  const std::vector<int32_t> no_tokens;  // shape-only ops read no data
  const StepRng rng{0, true};            // dropout on, as in training: its ops are part of the count
  autograd::Recorder r;
  r.policy = policy;
  autograd::Tape tape;
  r.tape = &tape;
  Tensor x;
  {
    autograd::RecordScope scope(r);
    x = model.embed(no_tokens, B, T, rng);
    autograd::clear_recipes();
  }
  st.embed = read_tape("embedding", tape, Tensor(), x);
  tape.clear();
  st.boundary_bytes = x.bytes();
  for (int i = 0; i < model.num_layers(); ++i) {
    Tensor y;
    {
      autograd::RecordScope scope(r);
      y = block_attention.empty() ? model.block(i, x, rng) : model.block(i, x, rng, block_attention[size_t(i)]);
      autograd::clear_recipes();
    }
    std::string name = model.layer_prefix(i);
    name.pop_back();
    st.blocks.push_back(read_tape(std::move(name), tape, x, y));
    tape.clear();
    x = std::move(y);
  }
  {
    autograd::Recorder h = r;
    h.policy = nullptr;  // policies apply to the blocks
    autograd::RecordScope scope(h);
    Tensor loss = model.loss(model.logits(x), {}, double(B * T));
    autograd::clear_recipes();
    st.head = read_tape("head", tape, x, loss);
  }
  return st;
}

BlockMemory block_memory(const PartTrace& p) {
  BlockMemory b;
  b.kept = p.kept_bytes();
  b.input = p.input_bytes();
  b.freed.assign(p.ops.size(), 0);
  b.rebuilt.assign(p.ops.size(), 0);
  for (const TensorRecord& t : p.kept) {
    const int first = *std::min_element(t.holders.begin(), t.holders.end());
    if (t.input) b.input_op = first;
    else b.freed[first] += t.bytes;
  }
  for (const TensorRecord& t : p.dropped)
    for (int h : t.holders) b.rebuilt[h] += t.bytes;
  return b;
}

MemoryPrediction simulate_memory(const StepTrace& tr, const Schedule& s, ActionLevels* levels) {
  std::vector<BlockMemory> bm;
  bm.reserve(tr.blocks.size());
  for (const PartTrace& p : tr.blocks) bm.push_back(block_memory(p));
  std::vector<const BlockMemory*> blocks;
  for (const BlockMemory& b : bm) blocks.push_back(&b);
  return simulate_memory(blocks, tr.boundary_bytes, tr.embed.kept_bytes(), tr.head.kept_bytes(), s, levels);
}

MemoryPrediction simulate_memory(const std::vector<const BlockMemory*>& bp, size_t x, size_t emb, size_t head,
                                 const Schedule& s, ActionLevels* levels) {
  const int L = int(bp.size());
  enum { kSaved, kCkpt, kRecomp };
  std::array<size_t, 3> live{}, peak{};
  size_t peak_total = 0;
  auto bump = [&](size_t transient_recompute = 0) {
    for (int c = 0; c < 3; ++c) peak[c] = std::max(peak[c], live[c] + (c == kRecomp ? transient_recompute : 0));
    peak_total = std::max(peak_total, live[0] + live[1] + live[2] + transient_recompute);
  };
  std::vector<int> boundary(L, -1);  // category of the kept input x_i, -1 when none
  struct Held { bool input = false; int cat = kSaved; };
  std::vector<Held> internals(L);
  if (levels) levels->before.assign(s.size(), 0);
  auto step = [&](size_t pc) {
    const Action& a = s[pc];
    const int i = a.block;
    if (levels) levels->before[pc] = live[0] + live[1] + live[2];
    if (a.kind == Action::Kind::Forward) {
      if (a.keep == Keep::Boundary && boundary[i] < 0) {
        boundary[i] = a.recompute ? kRecomp : kCkpt;
        live[boundary[i]] += x;
      }
      if (a.keep == Keep::Internals) {
        // The block saves its input too, unless that input is already held as a boundary.
        const int cat = a.recompute ? kRecomp : kSaved;
        internals[i] = {boundary[i] < 0, cat};
        live[cat] += boundary[i] >= 0 ? bp[i]->kept - bp[i]->input : bp[i]->kept;
      }
      bump();
    } else if (a.kind == Action::Kind::Backward) {
      Held& h = internals[i];
      for (int op = int(bp[i]->freed.size()) - 1; op >= 0; --op) {
        bump(bp[i]->rebuilt[op]);
        live[h.cat] -= bp[i]->freed[op];
        if (op == bp[i]->input_op && h.input) live[h.cat] -= bp[i]->input;
      }
      h = {};
      bump();
    } else {
      live[boundary[i]] -= x;
      boundary[i] = -1;
      bump();
    }
  };
  live[kSaved] += emb;  // the embedding's saves live until its backward, the last of the step
  size_t pc = 0;
  for (; pc < s.size() && s[pc].kind == Action::Kind::Forward && !s[pc].recompute; ++pc) step(pc);
  if (levels) levels->before_head = live[0] + live[1] + live[2];
  live[kSaved] += head;  // the head saves x_L, its norm's outputs, the logits and the loss's statistics
  bump();
  const size_t forward_end = live[0] + live[1] + live[2];
  live[kSaved] -= head;  // its backward runs before the chain's
  for (; pc < s.size(); ++pc) step(pc);
  MemoryPrediction m;
  m.forward_end = forward_end;
  m.peak_activation = peak_total;
  m.peak_saved = peak[kSaved];
  m.peak_checkpoint = peak[kCkpt];
  m.peak_recompute = peak[kRecomp];
  m.boundary_bytes = x;
  m.block_bytes = L > 0 ? bp[0]->kept : 0;
  return m;
}

}  // namespace remat::planner
