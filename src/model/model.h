// The model plug-in. Everything above src/model -- schedules, the step, the trainer, the planner,
// the report, bench, trace and plan -- sees a model only through this interface: the part before
// the blocks (embed), the chain of blocks (block i), the head and loss (logits, loss), the named
// parameters, and the model's own naming (which tensors belong to which block) and named policies.
// GPT-2 (gpt.h) and LLaMA (llama.h) implement it; no layer above names a tensor of either.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "autograd/ops.h"
#include "checkpoint/policy.h"
#include "core/record_fwd.h"
#include "core/tensor.h"

namespace remat {

enum class Arch { GPT2, Llama };
}  // namespace remat
// Names in files (record.h).
template <>
struct remat::record::EnumNames<remat::Arch> {
  static constexpr std::pair<remat::Arch, const char*> values[] = {{remat::Arch::GPT2, "gpt2"}, {remat::Arch::Llama, "llama"}};
};
template <>
struct remat::record::EnumNames<remat::autograd::AttentionKind> {
  static constexpr std::pair<remat::autograd::AttentionKind, const char*> values[] = {
      {remat::autograd::AttentionKind::Naive, "naive"}, {remat::autograd::AttentionKind::Flash, "flash"}};
};
namespace remat {

const char* arch_name(Arch a);  // "gpt2" | "llama"
inline std::ostream& operator<<(std::ostream& os, Arch a) { return os << arch_name(a); }
// Throws remat::Error naming the architectures remat knows.
Arch parse_arch(const std::string& name);

struct ModelConfig {
  Arch arch = Arch::GPT2;
  int64_t L = 4;          // blocks
  int64_t C = 128;        // channels
  int64_t NH = 4;         // query heads
  int64_t KVH = 0;        // key/value heads (grouped-query attention); 0 = NH. LLaMA only.
  int64_t T = 128;        // block size: the longest sequence (GPT-2's wpe rows, LLaMA's max positions)
  int64_t V = 256;        // vocabulary
  int64_t hidden = 0;     // MLP hidden size; 0 = the architecture's default (GPT-2 4C, LLaMA ~8C/3)
  float rope_theta = 10000.0f;  // LLaMA
  float norm_eps = 1e-5f;       // LLaMA's RMSNorm (GPT-2's layernorm uses 1e-5 as Hugging Face does)
  float dropout = 0;      // on embeddings, attention probabilities and both residual branches
  autograd::AttentionKind attention = autograd::AttentionKind::Naive;
  // --precision: the dtype of activations and of the matmul copy of the weights (Megatron's recipe:
  // fp32 master weights, gradients and optimizer state either way). --fp32-residual keeps the
  // residual stream, and so every block boundary, in fp32 under bf16.
  DType precision = DType::F32;
  bool fp32_residual = false;
  // The residual stream's dtype: what embed() returns and each block takes and returns.
  DType residual_dtype() const { return fp32_residual ? DType::F32 : precision; }

  // Every field, as every file names it (record.h: the one codec of a model config, in checkpoints,
  // plan files and calibrations).
  template <class S, class V>
  static void fields(S& s, V&& v) {
    v("arch", s.arch), v("layers", s.L), v("channels", s.C), v("heads", s.NH), v("kv_heads", s.KVH);
    v("block_size", s.T), v("vocab", s.V), v("hidden", s.hidden), v("rope_theta", s.rope_theta);
    v("norm_eps", s.norm_eps), v("dropout", s.dropout), v("attention", s.attention), v("precision", s.precision);
    v("fp32_residual", s.fp32_residual);
  }
  bool operator==(const ModelConfig&) const = default;

  int64_t kv_heads() const { return KVH > 0 ? KVH : NH; }
  int64_t head_size() const { return C / NH; }
  int64_t mlp_hidden() const;
  // Throws remat::Error with a hint for any inconsistent value.
  void validate() const;
  std::string describe() const;  // "gpt2 L=12 C=256 NH=4 T=256 V=256"
};

// Named presets of either architecture: "tiny", "small", "gpt2", "llama-tiny", "llama-7b", ...
ModelConfig preset(const std::string& name);
std::vector<std::string> preset_names();

struct Param {
  std::string name;  // Hugging Face name
  Tensor value;      // Category::Parameter: the fp32 master
  Tensor grad;       // Category::Gradient: fp32
  // Under --precision bf16, a matrix used in a matmul also has a bf16 copy (Category::Parameter,
  // "<name>.bf16") that the matmuls read; refresh_lowp() rounds the master into it. Its gradient is
  // the master's (the step binds both to `grad`).
  Tensor lowp;
};

// Generation with a key/value cache (model/sample.h): every block's keys and values of the positions
// so far (Category::KVCache, fp32).
struct KVCache {
  std::vector<autograd::KVLayer> layers;
  int64_t len = 0;  // positions held
  int64_t capacity() const { return layers.empty() ? 0 : layers.front().k.dim(0); }
};

// Dropout streams of one micro-step: every site draws at (seed, site << 40 | element).
struct StepRng {
  uint64_t seed = 0;
  bool train = true;  // false: dropout off (evaluation, sampling)
  autograd::Rng site(uint64_t index) const { return {seed, index << 40}; }
};
StepRng step_rng(uint64_t seed, uint64_t step, uint64_t micro);

// A model's named selective-recomputation policy: the block tensors it drops.
struct PolicyPreset {
  std::string name, description;
  std::vector<std::string> drop;  // names within a block
};

class Model {
 public:
  virtual ~Model() = default;
  const ModelConfig& config() const { return cfg_; }
  int num_layers() const { return int(cfg_.L); }

  // Fresh weights, a pure function of the seed (and their bf16 copies).
  void init(uint64_t seed) {
    init_weights(seed);
    refresh_lowp();
  }
  // Rounds every master into its bf16 copy (if any). Whatever changes the masters calls it: init and
  // load_weights (the optimizer step writes the copies in its own pass: adamw_step in step/step.h).
  void refresh_lowp();
  std::vector<Param>& params() { return params_; }
  const std::vector<Param>& params() const { return params_; }
  Param& param(const std::string& name);
  int64_t num_params() const;  // the sum of the parameters' sizes
  void zero_grad();

  // x0: (B, T, C) from B*T tokens.
  virtual Tensor embed(std::span<const int32_t> tokens, int64_t B, int64_t T, const StepRng& rng) const = 0;
  // Block i: x_{i+1} = f_i(x_i), its attention run by `attention`. Pure in (x, weights, rng,
  // attention): replayable. A plan may give each block its own kernel (StepOptions::block_attention).
  virtual Tensor block(int i, const Tensor& x, const StepRng& rng, autograd::AttentionKind attention) const = 0;
  // ... with the config's kernel.
  Tensor block(int i, const Tensor& x, const StepRng& rng) const { return block(i, x, rng, cfg_.attention); }
  // Final norm and LM head: logits (B, T, V).
  virtual Tensor logits(const Tensor& xL) const = 0;

  // Generation with a key/value cache, dropout off, no tape. A cache for `capacity` positions (at most
  // the block size); the embedding of n tokens at positions pos .. pos+n-1: (1, n, C); and block i on
  // them, attending over the cache's positions 0 .. pos+n-1 after adding theirs to it.
  KVCache make_kv_cache(int64_t capacity) const;
  virtual Tensor embed_at(std::span<const int32_t> tokens, int64_t pos) const = 0;
  virtual Tensor block_cached(int i, const Tensor& x, const autograd::KVLayer& kv, int64_t pos) const = 0;
  // Mean cross-entropy of the logits against targets, divided by `count` positions.
  Tensor loss(const Tensor& logits, std::span<const int32_t> targets, double count) const;

  // Naming. Tensors and parameters of block i are called layer_stem() + i + "." + local name
  // ("h.3.attn.probs", "model.layers.3.self_attn.probs").
  virtual std::string layer_stem() const = 0;
  std::string layer_prefix(int i) const { return layer_stem() + std::to_string(i) + "."; }
  // {i, local name} for a tensor of block i; nullopt for the embedding and the head.
  std::optional<std::pair<int, std::string>> split_name(const std::string& name) const;

  // Named policies: "none" keeps everything; the rest are the model's presets.
  virtual std::vector<PolicyPreset> policy_presets() const = 0;
  std::vector<std::string> policy_names() const;
  bool has_policy(const std::string& name) const;
  NamePolicy policy(const std::string& preset) const;  // throws naming the presets
  // --save-only / --save-all-but over this model's block tensors.
  NamePolicy named_policy(NamePolicy::Mode mode, std::vector<std::string> names, std::string label) const;

 protected:
  explicit Model(const ModelConfig& cfg) : cfg_(cfg) {}
  virtual void init_weights(uint64_t seed) = 0;
  // Registers a parameter (value and gradient, zeroed; shape-only under a ShapeOnlyScope) and
  // returns its index in params_. A `matmul` weight gets a bf16 copy under --precision bf16.
  size_t add_param(const std::string& name, Shape shape, bool matmul = false);
  // The fp32 master (norms, biases, embedding gathers).
  const Tensor& weight(size_t index) const { return params_[index].value; }
  // What a matmul reads: the bf16 copy under --precision bf16, else the master.
  const Tensor& mm_weight(size_t index) const {
    const Param& p = params_[index];
    return p.lowp.defined() ? p.lowp : p.value;
  }
  ModelConfig cfg_;
  std::vector<Param> params_;
};

// The model of cfg.arch, initialised with seed 0. Under a ShapeOnlyScope its parameters have shapes
// but no memory: the planner prices models far larger than this machine.
std::unique_ptr<Model> make_model(const ModelConfig& cfg);

}  // namespace remat
