// LLaMA (Touvron et al. 2023; LLaMA-2/3 with grouped-query attention): pre-norm blocks with RMSNorm,
// rotary position embeddings (Hugging Face's rotate_half convention), a SwiGLU MLP of its own hidden
// size, no biases, an untied LM head. Parameter names and layouts follow Hugging Face's
// LlamaForCausalLM: `model.layers.0.self_attn.q_proj.weight` is stored (out, in).
// Dropout (off by default; LLaMA trains without it) sits where GPT-2 has it: on the embedding, the
// attention probabilities and both residual branches.
#pragma once
#include "model/model.h"

namespace remat {

class Llama : public Model {
 public:
  explicit Llama(const ModelConfig& cfg);

  // N(0, 0.02) for every matrix (Hugging Face's initializer_range), ones for the norms.
  void init_weights(uint64_t seed) override;
  Tensor embed(std::span<const int32_t> tokens, int64_t B, int64_t T, const StepRng& rng) const override;
  // x + o_proj(attn(rope(q, k), v)) of input_layernorm(x), then + down(silu(gate) * up) of
  // post_attention_layernorm(.).
  Tensor block(int i, const Tensor& x, const StepRng& rng, autograd::AttentionKind attention) const override;
  using Model::block;
  Tensor logits(const Tensor& xL) const override;
  Tensor embed_at(std::span<const int32_t> tokens, int64_t pos) const override;
  Tensor block_cached(int i, const Tensor& x, const autograd::KVLayer& kv, int64_t pos) const override;
  std::string layer_stem() const override { return "model.layers."; }
  // selective: drop self_attn.probs; swiglu: drop mlp.act (silu(gate) * up);
  // norms: drop the input_layernorm / post_attention_layernorm outputs.
  std::vector<PolicyPreset> policy_presets() const override;

 private:
  struct BlockParams {
    size_t ln1, q, k, v, o, ln2, gate, up, down;
  };
  // Block i, its tokens at positions pos0 .., with its attention made by `attend` from the packed,
  // rotated qkv (training's kernels, or the cache's).
  template <class Attend>
  Tensor run_block(int i, const Tensor& x, float pd, uint64_t site, const StepRng& rng, int64_t pos0,
                   Attend&& attend) const;
  std::vector<BlockParams> blocks_;
  size_t embed_ = 0, norm_ = 0, head_ = 0;
};

}  // namespace remat
