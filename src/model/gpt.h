// GPT-2: pre-LN blocks, learned positions, tied LM head, optional dropout. Parameter names, shapes
// and layouts follow Hugging Face GPT-2 (`h.0.attn.c_attn.weight` is (in, out) = (C, 3C)), so a
// user's model.safetensors loads as it is.
#pragma once
#include "model/model.h"

namespace remat {

class GPT : public Model {
 public:
  explicit GPT(const ModelConfig& cfg);

  // GPT-2 init: N(0, 0.02) weights, residual projections N(0, 0.02/sqrt(2L)), zero biases, unit LN.
  void init_weights(uint64_t seed) override;
  // x0 = dropout(wte[tokens] + wpe[pos]): (B, T, C).
  Tensor embed(std::span<const int32_t> tokens, int64_t B, int64_t T, const StepRng& rng) const override;
  // Block i: x + attn(ln_1(x)), then + mlp(ln_2(.)).
  Tensor block(int i, const Tensor& x, const StepRng& rng, autograd::AttentionKind attention) const override;
  using Model::block;
  // ln_f, tied LM head: logits (B, T, V).
  Tensor logits(const Tensor& xL) const override;
  Tensor embed_at(std::span<const int32_t> tokens, int64_t pos) const override;
  Tensor block_cached(int i, const Tensor& x, const autograd::KVLayer& kv, int64_t pos) const override;
  std::string layer_stem() const override { return "h."; }
  // selective: drop attn.probs, the B*NH*T^2 term (Megatron-LM); backward redoes QK^T + softmax
  // gelu:      drop mlp.gelu, rebuilt from its input (llm.c's recompute=1)
  // norms:     drop the ln_1 / ln_2 outputs, rebuilt from the saved input, mean and rstd
  std::vector<PolicyPreset> policy_presets() const override;

 private:
  struct BlockParams {
    size_t ln1w, ln1b, attnw, attnb, projw, projb, ln2w, ln2b, fcw, fcb, mprojw, mprojb;
  };
  // Block i with its attention made by `attend` from the packed qkv (training's kernels, or the cache's).
  template <class Attend>
  Tensor run_block(int i, const Tensor& x, float pd, uint64_t site, const StepRng& rng, Attend&& attend) const;
  std::vector<BlockParams> blocks_;
  size_t wte_ = 0, wpe_ = 0, lnfw_ = 0, lnfb_ = 0;
};

}  // namespace remat
