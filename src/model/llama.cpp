#include "model/llama.h"

#include <random>

#include "core/error.h"

namespace remat {

Llama::Llama(const ModelConfig& cfg) : Model(cfg) {
  cfg_.validate();
  const int64_t C = cfg.C, HS = cfg.head_size(), NH = cfg.NH, KVH = cfg.kv_heads(), H = cfg.mlp_hidden();
  embed_ = add_param("model.embed_tokens.weight", {cfg.V, C});
  for (int64_t i = 0; i < cfg.L; ++i) {
    const std::string p = layer_prefix(int(i));
    BlockParams b{};
    b.ln1 = add_param(p + "input_layernorm.weight", {C});
    b.q = add_param(p + "self_attn.q_proj.weight", {NH * HS, C}, true);
    b.k = add_param(p + "self_attn.k_proj.weight", {KVH * HS, C}, true);
    b.v = add_param(p + "self_attn.v_proj.weight", {KVH * HS, C}, true);
    b.o = add_param(p + "self_attn.o_proj.weight", {C, NH * HS}, true);
    b.ln2 = add_param(p + "post_attention_layernorm.weight", {C});
    b.gate = add_param(p + "mlp.gate_proj.weight", {H, C}, true);
    b.up = add_param(p + "mlp.up_proj.weight", {H, C}, true);
    b.down = add_param(p + "mlp.down_proj.weight", {C, H}, true);
    blocks_.push_back(b);
  }
  norm_ = add_param("model.norm.weight", {C});
  head_ = add_param("lm_head.weight", {cfg.V, C}, true);
  init(0);
}

void Llama::init_weights(uint64_t seed) {
  std::mt19937_64 gen(seed);
  for (Param& p : params_) {
    Tensor& t = p.value;
    if (t.shape().size() == 1) {
      t.fill(1.0f);  // RMSNorm gains
      continue;
    }
    if (t.shape_only()) continue;
    std::normal_distribution<float> dist(0.0f, 0.02f);
    float* d = t.data();
    for (int64_t i = 0, n = t.numel(); i < n; ++i) d[i] = dist(gen);
  }
}

std::vector<PolicyPreset> Llama::policy_presets() const {
  return {{"selective", "drop the (B, NH, T, T) attention probabilities (Megatron-LM)", {"self_attn.probs"}},
          {"swiglu", "drop the SwiGLU product silu(gate) * up", {"mlp.act"}},
          {"norms", "drop the RMSNorm outputs", {"input_layernorm", "post_attention_layernorm"}}};
}

Tensor Llama::embed(std::span<const int32_t> tokens, int64_t B, int64_t T, const StepRng& rng) const {
  if (T > cfg_.T)
    throw Error("model", "sequence length " + std::to_string(T) + " exceeds the model's " + std::to_string(cfg_.T) +
                             " positions", "use --seq <= " + std::to_string(cfg_.T));
  Tensor x = autograd::embedding(tokens, weight(embed_), Tensor(), B, T, "model.embed_tokens", cfg_.residual_dtype());
  return autograd::dropout(x, rng.train ? cfg_.dropout : 0.0f, rng.site(0), "model.embed_tokens.drop");
}

Tensor Llama::block(int i, const Tensor& x, const StepRng& rng, autograd::AttentionKind attention) const {
  const float pd = rng.train ? cfg_.dropout : 0.0f;
  const uint64_t site = 1 + 3 * uint64_t(i);
  return run_block(i, x, pd, site, rng, 0, [&](const Tensor& qkv) {
    return autograd::attention(qkv, cfg_.NH, cfg_.kv_heads(), pd, rng.site(site), attention, layer_prefix(i) + "self_attn");
  });
}

Tensor Llama::block_cached(int i, const Tensor& x, const autograd::KVLayer& kv, int64_t pos) const {
  return run_block(i, x, 0.0f, 1 + 3 * uint64_t(i), StepRng{0, false}, pos, [&](const Tensor& qkv) {
    return autograd::attention_cached(qkv, cfg_.NH, cfg_.kv_heads(), kv, pos, layer_prefix(i) + "self_attn");
  });
}

Tensor Llama::embed_at(std::span<const int32_t> tokens, int64_t pos) const {
  const int64_t n = int64_t(tokens.size());
  REMAT_ASSERT(n > 0 && pos >= 0 && pos + n <= cfg_.T, "embed_at: positions past the model's");
  return autograd::embedding(tokens, weight(embed_), Tensor(), 1, n, "model.embed_tokens", cfg_.residual_dtype());
}

template <class Attend>
Tensor Llama::run_block(int i, const Tensor& x, float pd, uint64_t site, const StepRng& rng, int64_t pos0,
                        Attend&& attend) const {
  namespace ag = autograd;
  const BlockParams& w = blocks_.at(i);
  const std::string p = layer_prefix(i);
  const int64_t NH = cfg_.NH, KVH = cfg_.kv_heads();
  const DType dt = cfg_.precision;  // the block's internals; x and the residual stream: residual_dtype()
  Tensor h = ag::rmsnorm(x, weight(w.ln1), cfg_.norm_eps, p + "input_layernorm", dt);      // (B, T, C)
  Tensor q = ag::linear_nt(h, mm_weight(w.q), p + "self_attn.q_proj");                      // (B, T, NH*HS)
  Tensor k = ag::linear_nt(h, mm_weight(w.k), p + "self_attn.k_proj");                      // (B, T, KVH*HS)
  Tensor v = ag::linear_nt(h, mm_weight(w.v), p + "self_attn.v_proj");                      // (B, T, KVH*HS)
  h = Tensor();
  Tensor qkv = ag::rope_qkv(q, k, v, NH, KVH, cfg_.rope_theta, p + "self_attn.qkv", pos0);  // (B, T, (NH+2KVH)*HS)
  q = k = v = Tensor();
  Tensor a = attend(qkv);                                                                   // (B, T, NH*HS)
  qkv = Tensor();
  Tensor o = ag::linear_nt(a, mm_weight(w.o), p + "self_attn.o_proj");                      // (B, T, C)
  a = Tensor();
  o = ag::dropout(o, pd, rng.site(site + 1), p + "self_attn.drop");
  Tensor r = ag::add(x, o, p + "res_1");                                                    // (B, T, C)
  o = Tensor();
  h = ag::rmsnorm(r, weight(w.ln2), cfg_.norm_eps, p + "post_attention_layernorm", dt);    // (B, T, C)
  Tensor gate = ag::linear_nt(h, mm_weight(w.gate), p + "mlp.gate_proj");                   // (B, T, H)
  Tensor up = ag::linear_nt(h, mm_weight(w.up), p + "mlp.up_proj");                         // (B, T, H)
  h = ag::swiglu(gate, up, p + "mlp.act");                                                  // (B, T, H)
  gate = up = Tensor();
  h = ag::linear_nt(h, mm_weight(w.down), p + "mlp.down_proj");                   // (B, T, C)
  h = ag::dropout(h, pd, rng.site(site + 2), p + "mlp.drop");
  return ag::add(r, h, p + "res_2");                                                        // (B, T, C)
}

Tensor Llama::logits(const Tensor& xL) const {
  Tensor h = autograd::rmsnorm(xL, weight(norm_), cfg_.norm_eps, "model.norm", cfg_.precision);
  return autograd::linear_nt(h, mm_weight(head_), "lm_head");  // (B, T, V)
}

}  // namespace remat
