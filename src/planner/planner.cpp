#include "planner/planner.h"

#include <algorithm>
#include <array>
#include <map>

#include "core/error.h"

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

std::vector<TensorSpec> block_table(const GPTConfig& cfg, int64_t B, int64_t T, int i) {
  const int64_t C = cfg.C, NH = cfg.NH;
  const std::string p = "h." + std::to_string(i) + ".";
  std::vector<TensorSpec> t;
  t.push_back(spec(block_input_name(cfg, i), {B, T, C}));  // ln_1 input
  t.push_back(spec(p + "ln_1.mean", {B, T}));
  t.push_back(spec(p + "ln_1.rstd", {B, T}));
  t.push_back(spec(p + "ln_1", {B, T, C}));                // c_attn input
  t.push_back(spec(p + "attn.c_attn", {B, T, 3 * C}));     // attention qkv
  if (cfg.attention == autograd::AttentionKind::Naive)
    t.push_back(spec(p + "attn.probs", {B, NH, T, T}));    // the B*NH*T^2 term
  else
    t.push_back(spec(p + "attn.lse", {B, NH, T}));
  t.push_back(spec(p + "attn", {B, T, C}));                // c_proj input (and flash's saved output)
  t.push_back(spec(p + "res_1", {B, T, C}));               // ln_2 input
  t.push_back(spec(p + "ln_2.mean", {B, T}));
  t.push_back(spec(p + "ln_2.rstd", {B, T}));
  t.push_back(spec(p + "ln_2", {B, T, C}));                // c_fc input
  t.push_back(spec(p + "mlp.c_fc", {B, T, 4 * C}));        // gelu input
  t.push_back(spec(p + "mlp.gelu", {B, T, 4 * C}));        // c_proj input
  return t;
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

MemoryPrediction simulate_memory(const GPTConfig& cfg, int64_t B, int64_t T, const Schedule& s) {
  const int L = int(cfg.L);
  const size_t x = size_t(B * T * cfg.C) * sizeof(float);
  const size_t block = total_bytes(block_table(cfg, B, T, 0));
  const size_t head = total_bytes(head_table(cfg, B, T));
  enum { kSaved, kCkpt, kRecomp };
  std::array<size_t, 3> live{}, peak{};
  size_t peak_total = 0;
  auto bump = [&] {
    for (int c = 0; c < 3; ++c) peak[c] = std::max(peak[c], live[c]);
    peak_total = std::max(peak_total, live[0] + live[1] + live[2]);
  };
  std::vector<bool> boundary(L, false);
  struct Held { size_t bytes = 0; int cat = kSaved; };
  std::vector<Held> internals(L);
  size_t pc = 0;
  auto step = [&](const Action& a) {
    const int i = a.block;
    if (a.kind == Action::Kind::Forward) {
      if (a.keep == Keep::Boundary && !boundary[i]) { boundary[i] = true; live[kCkpt] += x; }
      if (a.keep == Keep::Internals) {
        // The block saves its input too, unless that input is already held as a checkpoint.
        const size_t b = boundary[i] ? block - x : block;
        const int cat = a.recompute ? kRecomp : kSaved;
        internals[i] = {b, cat};
        live[cat] += b;
      }
    } else if (a.kind == Action::Kind::Backward) {
      live[internals[i].cat] -= internals[i].bytes;
      internals[i] = {};
    } else {
      boundary[i] = false;
      live[kCkpt] -= x;
    }
    bump();
  };
  for (; pc < s.size() && s[pc].kind == Action::Kind::Forward && !s[pc].recompute; ++pc) step(s[pc]);
  live[kSaved] += head;  // the head saves x_L, ln_f's outputs, the logits and the loss's lse
  bump();
  live[kSaved] -= head;  // its backward runs before the chain's
  for (; pc < s.size(); ++pc) step(s[pc]);
  MemoryPrediction m;
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

ComputePrediction predict_compute(const GPTConfig& cfg, int64_t B, int64_t T, const Schedule& s) {
  const BlockFlops f = flops(cfg, B, T);
  const ScheduleCounts c = count(s);
  ComputePrediction p;
  p.block_forwards = c.forwards;
  p.block_recomputes = c.recomputes;
  p.fwd = f.head_fwd + c.forwards * f.block_fwd;
  p.recompute = c.recomputes * f.block_fwd;
  p.bwd = f.head_bwd + c.backwards * f.block_bwd;
  return p;
}

}  // namespace remat::planner
