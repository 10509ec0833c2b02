#include "model/gpt.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "core/error.h"

namespace remat {

GPT::GPT(const ModelConfig& cfg) : Model(cfg) {
  cfg_.validate();
  const int64_t C = cfg.C, H = cfg.mlp_hidden();
  wte_ = add_param("wte.weight", {cfg.V, C}, /*matmul=*/true);  // the tied LM head
  wpe_ = add_param("wpe.weight", {cfg.T, C});
  for (int64_t i = 0; i < cfg.L; ++i) {
    const std::string p = layer_prefix(int(i));
    BlockParams b{};
    b.ln1w = add_param(p + "ln_1.weight", {C});
    b.ln1b = add_param(p + "ln_1.bias", {C});
    b.attnw = add_param(p + "attn.c_attn.weight", {C, 3 * C}, true);
    b.attnb = add_param(p + "attn.c_attn.bias", {3 * C});
    b.projw = add_param(p + "attn.c_proj.weight", {C, C}, true);
    b.projb = add_param(p + "attn.c_proj.bias", {C});
    b.ln2w = add_param(p + "ln_2.weight", {C});
    b.ln2b = add_param(p + "ln_2.bias", {C});
    b.fcw = add_param(p + "mlp.c_fc.weight", {C, H}, true);
    b.fcb = add_param(p + "mlp.c_fc.bias", {H});
    b.mprojw = add_param(p + "mlp.c_proj.weight", {H, C}, true);
    b.mprojb = add_param(p + "mlp.c_proj.bias", {C});
    blocks_.push_back(b);
  }
  lnfw_ = add_param("ln_f.weight", {C});
  lnfb_ = add_param("ln_f.bias", {C});
  init(0);
}

void GPT::init_weights(uint64_t seed) {
  std::mt19937_64 gen(seed);
  const float proj_std = 0.02f / std::sqrt(2.0f * float(cfg_.L));
  auto set = [&](size_t k, float v) { params_[k].value.fill(v); };
  auto normal = [&](size_t k, float stddev) {
    Tensor& t = params_[k].value;
    if (t.shape_only()) return;
    std::normal_distribution<float> dist(0.0f, stddev);
    float* d = t.data();
    for (int64_t i = 0, n = t.numel(); i < n; ++i) d[i] = dist(gen);
  };
  // Parameter order (the order of registration) fixes the draws.
  normal(wte_, 0.02f);
  normal(wpe_, 0.02f);
  for (const BlockParams& b : blocks_) {
    set(b.ln1w, 1.0f); set(b.ln1b, 0.0f);
    normal(b.attnw, 0.02f); set(b.attnb, 0.0f);
    normal(b.projw, proj_std); set(b.projb, 0.0f);
    set(b.ln2w, 1.0f); set(b.ln2b, 0.0f);
    normal(b.fcw, 0.02f); set(b.fcb, 0.0f);
    normal(b.mprojw, proj_std); set(b.mprojb, 0.0f);
  }
  set(lnfw_, 1.0f);
  set(lnfb_, 0.0f);
}

std::vector<PolicyPreset> GPT::policy_presets() const {
  return {{"selective", "drop the (B, NH, T, T) attention probabilities (Megatron-LM)", {"attn.probs"}},
          {"gelu", "drop the GELU output (llm.c's recompute=1)", {"mlp.gelu"}},
          {"norms", "drop the layernorm outputs", {"ln_1", "ln_2"}}};
}

Tensor GPT::embed(std::span<const int32_t> tokens, int64_t B, int64_t T, const StepRng& rng) const {
  if (T > cfg_.T)
    throw Error("model", "sequence length " + std::to_string(T) + " exceeds the block size " + std::to_string(cfg_.T),
                "use --seq <= " + std::to_string(cfg_.T));
  Tensor x = autograd::embedding(tokens, weight(wte_), weight(wpe_), B, T, "emb", cfg_.residual_dtype());
  return autograd::dropout(x, rng.train ? cfg_.dropout : 0.0f, rng.site(0), "emb.drop");
}

Tensor GPT::block(int i, const Tensor& x, const StepRng& rng, autograd::AttentionKind attention) const {
  const float pd = rng.train ? cfg_.dropout : 0.0f;
  const uint64_t site = 1 + 3 * uint64_t(i);
  return run_block(i, x, pd, site, rng, [&](const Tensor& qkv) {
    return autograd::attention(qkv, cfg_.NH, cfg_.NH, pd, rng.site(site), attention, layer_prefix(i) + "attn");
  });
}

Tensor GPT::block_cached(int i, const Tensor& x, const autograd::KVLayer& kv, int64_t pos) const {
  return run_block(i, x, 0.0f, 1 + 3 * uint64_t(i), StepRng{0, false}, [&](const Tensor& qkv) {
    return autograd::attention_cached(qkv, cfg_.NH, cfg_.NH, kv, pos, layer_prefix(i) + "attn");
  });
}

Tensor GPT::embed_at(std::span<const int32_t> tokens, int64_t pos) const {
  const int64_t n = int64_t(tokens.size()), C = cfg_.C;
  REMAT_ASSERT(n > 0 && pos >= 0 && pos + n <= cfg_.T, "embed_at: positions past the block size");
  // wpe's rows pos .. pos+n-1 as a table of n positions.
  Tensor rows = Tensor::empty({n, C}, Category::Workspace, "wpe.rows");
  if (!rows.shape_only()) std::copy_n(weight(wpe_).data() + pos * C, n * C, rows.data());
  return autograd::embedding(tokens, weight(wte_), rows, 1, n, "emb", cfg_.residual_dtype());
}

template <class Attend>
Tensor GPT::run_block(int i, const Tensor& x, float pd, uint64_t site, const StepRng& rng, Attend&& attend) const {
  namespace ag = autograd;
  const BlockParams& w = blocks_.at(i);
  const std::string p = layer_prefix(i);
  const DType dt = cfg_.precision;  // the block's internals; x and the residual stream: residual_dtype()
  Tensor h = ag::layernorm(x, weight(w.ln1w), weight(w.ln1b), p + "ln_1", dt);               // (B, T, C)
  Tensor qkv = ag::linear(h, mm_weight(w.attnw), weight(w.attnb), p + "attn.c_attn");        // (B, T, 3C)
  Tensor a = attend(qkv);                                                                    // (B, T, C)
  Tensor o = ag::linear(a, mm_weight(w.projw), weight(w.projb), p + "attn.c_proj");          // (B, T, C)
  o = ag::dropout(o, pd, rng.site(site + 1), p + "attn.drop");
  Tensor r = ag::add(x, o, p + "res_1");                                                     // (B, T, C)
  h = ag::layernorm(r, weight(w.ln2w), weight(w.ln2b), p + "ln_2", dt);                      // (B, T, C)
  h = ag::linear(h, mm_weight(w.fcw), weight(w.fcb), p + "mlp.c_fc");                        // (B, T, 4C)
  h = ag::gelu(h, p + "mlp.gelu");                                                           // (B, T, 4C)
  h = ag::linear(h, mm_weight(w.mprojw), weight(w.mprojb), p + "mlp.c_proj");                // (B, T, C)
  h = ag::dropout(h, pd, rng.site(site + 2), p + "mlp.drop");
  return ag::add(r, h, p + "res_2");                                                         // (B, T, C)
}

Tensor GPT::logits(const Tensor& xL) const {
  Tensor h = autograd::layernorm(xL, weight(lnfw_), weight(lnfb_), "ln_f", cfg_.precision);
  return autograd::linear_nt(h, mm_weight(wte_), "lm_head");  // (B, T, V)
}

}  // namespace remat
