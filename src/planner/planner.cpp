#include "planner/planner.h"

#include <algorithm>
#include <array>
#include <map>

#include "core/error.h"
#include "autograd/tape.h"

namespace remat::planner {

namespace {
TensorSpec spec(std::string name, Shape shape) {
  const size_t bytes = size_t(shape_numel(shape)) * sizeof(float);
  return {std::move(name), std::move(shape), bytes};
}
std::string block_input_name(const GPTConfig& cfg, int i) {
  if (i > 0) return "h." + std::to_string(i - 1) + ".res_2";
  return cfg.dropout > 0 ? "emb.drop" : "emb";
}
}  // namespace

const std::vector<std::string>& block_ops() {
  static const std::vector<std::string> ops = {"ln_1", "attn.c_attn", "attn", "attn.c_proj", "attn.drop", "res_1",
                                               "ln_2", "mlp.c_fc", "mlp.gelu", "mlp.c_proj", "mlp.drop", "res_2"};
  return ops;
}

std::vector<TensorSpec> block_table(const GPTConfig& cfg, int64_t B, int64_t T, int i) {
  const int64_t C = cfg.C, NH = cfg.NH;
  const std::string p = "h." + std::to_string(i) + ".";
  const bool flash = cfg.attention == autograd::AttentionKind::Flash;
  const double N = double(B * T);
  // Holders are indices into block_ops(): 0 ln_1, 1 c_attn, 2 attn, 3 attn.c_proj, 6 ln_2, 7 c_fc,
  // 8 gelu, 9 mlp.c_proj. Recipes mirror the ops' offer_recipe calls (autograd/ops_*.cpp).
  auto t = [&](std::string name, Shape shape, std::vector<int> holders, std::vector<std::string> from = {},
               double flops = 0) {
    TensorSpec s = spec(std::move(name), std::move(shape));
    s.holders = std::move(holders);
    s.rebuilt_from = std::move(from);
    s.rebuild_flops = flops;
    return s;
  };
  const std::string x = block_input_name(cfg, i);
  const double pairs = double(T) * double(T + 1) / 2.0;
  std::vector<TensorSpec> v;
  v.push_back(t(x, {B, T, C}, {0}));
  v.push_back(t(p + "ln_1.mean", {B, T}, {0}));
  v.push_back(t(p + "ln_1.rstd", {B, T}, {0}));
  v.push_back(t(p + "ln_1", {B, T, C}, {1}, {x, p + "ln_1.mean", p + "ln_1.rstd"}, 8.0 * N * C));
  v.push_back(t(p + "attn.c_attn", {B, T, 3 * C}, {2}));  // qkv
  if (!flash)
    v.push_back(t(p + "attn.probs", {B, NH, T, T}, {2}, {p + "attn.c_attn"}, 4.0 * B * NH * pairs * (C / NH)));
  else
    v.push_back(t(p + "attn.lse", {B, NH, T}, {2}));
  v.push_back(t(p + "attn", {B, T, C}, flash ? std::vector<int>{2, 3} : std::vector<int>{3}));
  v.push_back(t(p + "res_1", {B, T, C}, {6}));
  v.push_back(t(p + "ln_2.mean", {B, T}, {6}));
  v.push_back(t(p + "ln_2.rstd", {B, T}, {6}));
  v.push_back(t(p + "ln_2", {B, T, C}, {7}, {p + "res_1", p + "ln_2.mean", p + "ln_2.rstd"}, 8.0 * N * C));
  v.push_back(t(p + "mlp.c_fc", {B, T, 4 * C}, {8}));
  v.push_back(t(p + "mlp.gelu", {B, T, 4 * C}, {9}, {p + "mlp.c_fc"}, 10.0 * N * 4 * C));
  return v;
}

size_t PolicyTable::kept_bytes() const {
  size_t b = 0;
  for (auto& s : kept) b += s.bytes;
  return b;
}

PolicyTable apply_policy(const std::vector<TensorSpec>& table, const autograd::Policy* policy) {
  PolicyTable r;
  std::map<std::string, const TensorSpec*> by_name;
  for (const TensorSpec& s : table) by_name[s.name] = &s;
  auto keep = [&](const std::string& n) { return !policy || policy->keep(n); };
  // Kept in effect: asked for, or (save-only) impossible to drop since nothing rebuilds it.
  auto kept_in_effect = [&](const std::string& n) {
    auto it = by_name.find(n);
    return keep(n) || (!policy->strict() && (it == by_name.end() || it->second->rebuilt_from.empty()));
  };
  std::map<std::string, std::vector<int>> extra;  // recipe inputs are held by the dropped tensor's holders too
  for (const TensorSpec& s : table) {
    bool drop = !keep(s.name);
    if (drop) {
      bool ok = !s.rebuilt_from.empty();
      for (auto& in : s.rebuilt_from) ok = ok && kept_in_effect(in);
      if (!ok && policy->strict())
        throw Error("policy", "cannot drop '" + s.name + "': no op rebuilds it from tensors that are kept",
                    "droppable names are ln_1, ln_2, mlp.gelu and attn.probs (naive attention); the rest is "
                    "recomputed by a segment strategy such as --recompute block");
      drop = ok;
    }
    if (drop) {
      r.dropped.push_back(s);
      for (auto& in : s.rebuilt_from) extra[in].insert(extra[in].end(), s.holders.begin(), s.holders.end());
    } else {
      r.kept.push_back(s);
    }
  }
  for (TensorSpec& s : r.kept) {
    auto it = extra.find(s.name);
    if (it != extra.end()) s.holders.insert(s.holders.end(), it->second.begin(), it->second.end());
  }
  return r;
}

std::vector<TensorSpec> head_table(const GPTConfig& cfg, int64_t B, int64_t T) {
  std::vector<TensorSpec> t;
  t.push_back(spec("h." + std::to_string(cfg.L - 1) + ".res_2", {B, T, cfg.C}));  // ln_f input
  t.push_back(spec("ln_f.mean", {B, T}));
  t.push_back(spec("ln_f.rstd", {B, T}));
  t.push_back(spec("ln_f", {B, T, cfg.C}));      // LM head input
  t.push_back(spec("lm_head", {B, T, cfg.V}));   // logits
  t.push_back(spec("loss.lse", {B * T}));
  return t;
}

size_t total_bytes(const std::vector<TensorSpec>& t) {
  size_t b = 0;
  for (auto& s : t) b += s.bytes;
  return b;
}

MemoryPrediction simulate_memory(const GPTConfig& cfg, int64_t B, int64_t T, const Schedule& s,
                                 const autograd::Policy* policy) {
  const int L = int(cfg.L);
  const size_t x = size_t(B * T * cfg.C) * sizeof(float);
  const size_t head = total_bytes(head_table(cfg, B, T));
  const int nops = int(block_ops().size());
  // Per block (a policy may name single blocks): bytes kept, bytes freed after each op's backward
  // (by the earliest-in-forward holder; the input x_i apart), and bytes rebuilt during each.
  struct BlockPlan {
    size_t kept = 0, input = 0;
    std::vector<size_t> freed, rebuilt;
  };
  std::vector<BlockPlan> bp(L);
  for (int i = 0; i < L; ++i) {
    if (i > 0 && !policy) {  // without a policy every block is alike
      bp[i] = bp[0];
      continue;
    }
    const PolicyTable pt = apply_policy(block_table(cfg, B, T, i), policy);
    BlockPlan& b = bp[i];
    b.kept = pt.kept_bytes();
    b.freed.assign(nops, 0);
    b.rebuilt.assign(nops, 0);
    for (size_t k = 0; k < pt.kept.size(); ++k) {
      const TensorSpec& t = pt.kept[k];
      if (k == 0) { b.input = t.bytes; continue; }  // x_i: freed with op 0 unless it is a checkpoint
      b.freed[*std::min_element(t.holders.begin(), t.holders.end())] += t.bytes;
    }
    for (const TensorSpec& t : pt.dropped)
      for (int h : t.holders) b.rebuilt[h] += t.bytes;
  }
  const size_t block = bp[0].kept;

  enum { kSaved, kCkpt, kRecomp };
  std::array<size_t, 3> live{}, peak{};
  size_t peak_total = 0;
  auto bump = [&](size_t transient_recompute = 0) {
    for (int c = 0; c < 3; ++c) peak[c] = std::max(peak[c], live[c] + (c == kRecomp ? transient_recompute : 0));
    peak_total = std::max(peak_total, live[0] + live[1] + live[2] + transient_recompute);
  };
  std::vector<int> boundary(L, -1);  // category of the kept input x_i, -1 when none
  struct Held { bool input = false; int cat = kSaved; bool live = false; };
  std::vector<Held> internals(L);
  auto step = [&](const Action& a) {
    const int i = a.block;
    if (a.kind == Action::Kind::Forward) {
      if (a.keep == Keep::Boundary && boundary[i] < 0) {
        boundary[i] = a.recompute ? kRecomp : kCkpt;
        live[boundary[i]] += x;
      }
      if (a.keep == Keep::Internals) {
        // The block saves its input too, unless that input is already held as a boundary.
        const int cat = a.recompute ? kRecomp : kSaved;
        internals[i] = {boundary[i] < 0, cat, true};
        live[cat] += boundary[i] >= 0 ? bp[i].kept - x : bp[i].kept;
      }
      bump();
    } else if (a.kind == Action::Kind::Backward) {
      Held& h = internals[i];
      for (int op = nops - 1; op >= 0; --op) {
        bump(bp[i].rebuilt[op]);
        live[h.cat] -= bp[i].freed[op];
        if (op == 0 && h.input) live[h.cat] -= bp[i].input;
      }
      h = {};
      bump();
    } else {
      live[boundary[i]] -= x;
      boundary[i] = -1;
      bump();
    }
  };
  size_t pc = 0;
  for (; pc < s.size() && s[pc].kind == Action::Kind::Forward && !s[pc].recompute; ++pc) step(s[pc]);
  live[kSaved] += head;  // the head saves x_L, ln_f's outputs, the logits and the loss's lse
  bump();
  const size_t forward_end = live[0] + live[1] + live[2];
  live[kSaved] -= head;  // its backward runs before the chain's
  for (; pc < s.size(); ++pc) step(s[pc]);
  MemoryPrediction m;
  m.forward_end = forward_end;
  m.peak_activation = peak_total;
  m.peak_saved = peak[kSaved];
  m.peak_checkpoint = peak[kCkpt];
  m.peak_recompute = peak[kRecomp];
  m.boundary_bytes = x;
  m.block_bytes = block;
  return m;
}

BlockFlops flops(const GPTConfig& cfg, int64_t B, int64_t T) {
  // Mirrors the ops' own counts (autograd/ops_*.cpp).
  const double N = double(B * T), C = double(cfg.C), V = double(cfg.V), NH = double(cfg.NH);
  const double HS = C / NH;
  const double lin = 2.0 * N * C * (3 * C) + 2.0 * N * C * C + 2.0 * N * C * (4 * C) + 2.0 * N * (4 * C) * C;
  const double ln = 2 * 8.0 * N * C;
  const double pairs = double(T) * double(T + 1) / 2.0;
  const double att = 4.0 * B * NH * pairs * HS;
  const double gelu = 10.0 * N * 4 * C;
  const double adds = 2 * N * C;
  const double drops = cfg.dropout > 0 ? 2 * N * C : 0;
  const double att_bwd = cfg.attention == autograd::AttentionKind::Flash ? 2.5 * att : 2 * att;
  BlockFlops f;
  f.block_fwd = lin + ln + att + gelu + adds + drops;
  f.block_bwd = 2 * lin + 2 * ln + att_bwd + 2 * gelu + 2 * adds + (cfg.dropout > 0 ? 2 * N * C : 0);
  const double emb = N * C + (cfg.dropout > 0 ? N * C : 0);
  const double head = 8.0 * N * C + 2.0 * N * C * V + 4.0 * N * V;
  f.head_fwd = emb + head;
  f.head_bwd = 2 * (N * C) + (cfg.dropout > 0 ? N * C : 0) + 2 * 8.0 * N * C + 2 * 2.0 * N * C * V + 4.0 * N * V;
  return f;
}

ComputePrediction predict_compute(const GPTConfig& cfg, int64_t B, int64_t T, const Schedule& s,
                                   const autograd::Policy* policy) {
  const BlockFlops f = flops(cfg, B, T);
  const ScheduleCounts c = count(s);
  double rebuild = 0;  // per backward of every block: each dropped tensor is rebuilt once per holder
  for (int i = 0; i < cfg.L; ++i)
    for (const TensorSpec& t : apply_policy(block_table(cfg, B, T, i), policy).dropped)
      rebuild += t.rebuild_flops * double(t.holders.size());
  rebuild /= double(cfg.L);  // c.backwards counts each block's backward once
  ComputePrediction p;
  p.block_forwards = c.forwards;
  p.block_recomputes = c.recomputes;
  p.fwd = f.head_fwd + c.forwards * f.block_fwd;
  p.recompute = c.recomputes * f.block_fwd + c.backwards * rebuild;
  p.bwd = f.head_bwd + c.backwards * f.block_bwd;
  return p;
}

}  // namespace remat::planner
