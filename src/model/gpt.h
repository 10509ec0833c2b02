// GPT-2: pre-LN blocks, learned positions, tied LM head, optional dropout. Parameter names, shapes
// and layouts follow Hugging Face GPT-2 (`h.0.attn.c_attn.weight` is (in, out) = (C, 3C)), so a
// user's model.safetensors loads as it is.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "core/tensor.h"

namespace remat {

struct GPTConfig {
  int64_t L = 4;      // blocks
  int64_t C = 128;    // channels
  int64_t NH = 4;     // heads
  int64_t T = 128;    // block size: the longest sequence (wpe rows)
  int64_t V = 256;    // vocabulary
  float dropout = 0;  // on embeddings, attention probabilities and both residual branches
  autograd::AttentionKind attention = autograd::AttentionKind::Naive;

  // Throws remat::Error with a hint for any inconsistent value.
  void validate() const;
  std::string describe() const;  // "L=12 C=256 NH=4 T=256 V=256"
  int64_t num_params() const;
};

// Named presets: "tiny", "small" (the L12 C256), "gpt2" (124M), ...
GPTConfig preset(const std::string& name);
std::vector<std::string> preset_names();

struct Param {
  std::string name;  // Hugging Face name
  Tensor value;      // Category::Parameter
  Tensor grad;       // Category::Gradient
};

// Dropout streams of one micro-step: every site draws at (seed, site << 40 | element).
struct StepRng {
  uint64_t seed = 0;
  bool train = true;  // false: dropout off (evaluation, sampling)
  autograd::Rng site(uint64_t index) const { return {seed, index << 40}; }
};
StepRng step_rng(uint64_t seed, uint64_t step, uint64_t micro);

class GPT {
 public:
  explicit GPT(const GPTConfig& cfg);
  const GPTConfig& config() const { return cfg_; }

  // GPT-2 init: N(0, 0.02) weights, residual projections N(0, 0.02/sqrt(2L)), zero biases, unit LN.
  void init(uint64_t seed);
  std::vector<Param>& params() { return params_; }
  const std::vector<Param>& params() const { return params_; }
  Param& param(const std::string& name);
  void zero_grad();

  // x0 = dropout(wte[tokens] + wpe[pos]): (B, T, C).
  Tensor embed(std::span<const int32_t> tokens, int64_t B, int64_t T, const StepRng& rng) const;
  // Block i: x + attn(ln_1(x)), then + mlp(ln_2(.)). Pure in (x, weights, rng): replayable.
  Tensor block(int i, const Tensor& x, const StepRng& rng) const;
  // ln_f, tied LM head: logits (B, T, V).
  Tensor logits(const Tensor& xL) const;
  // Mean cross-entropy of the logits against targets, divided by `count` positions.
  Tensor loss(const Tensor& logits, std::span<const int32_t> targets, double count) const;

 private:
  struct BlockParams {
    const Tensor *ln1w, *ln1b, *attnw, *attnb, *projw, *projb, *ln2w, *ln2b, *fcw, *fcb, *mprojw, *mprojb;
  };
  GPTConfig cfg_;
  std::vector<Param> params_;
  std::vector<BlockParams> blocks_;
  const Tensor *wte_ = nullptr, *wpe_ = nullptr, *lnfw_ = nullptr, *lnfb_ = nullptr;
};

}  // namespace remat
