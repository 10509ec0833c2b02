// Model weights on disk, as Hugging Face lays them out and as remat writes them:
//  - one .safetensors file (remat's own: F32 or BF16, with the config as "remat.*" metadata; or a
//    user's Hugging Face model.safetensors);
//  - a Hugging Face model folder: config.json (the source of truth for the architecture) and
//    model.safetensors, or model.safetensors.index.json and its shards (core/tensor_store.h).
// Parameter names are Hugging Face's for both architectures (GPT-2: wte.weight, h.N.attn.c_attn.weight,
// ...; LLaMA: model.embed_tokens.weight, model.layers.N.self_attn.q_proj.weight, ...).
#pragma once
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "model/model.h"

namespace remat {

// Shards of a saved model folder hold at most this many bytes (a tensor larger than that gets one of
// its own), as transformers' save_pretrained does by default.
constexpr size_t kDefaultShardBytes = size_t(2) << 30;

// The numbers a model config may hold, from flags and files alike (config.json, plan, calibration and
// checkpoint files, through record::check_limits). Beyond them a value is a typo or a damaged file:
// more blocks than remat plans, a size that overflows int32 token ids or shapes, a rotary base or
// norm epsilon no model uses (1e300 would become infinity as a float and be saved as null).
struct ConfigLimits {
  static constexpr int64_t kMaxLayers = 100000;
  static constexpr int64_t kMaxSize = (int64_t(1) << 31) - 1;  // channels, heads, block size, vocab, hidden
  static constexpr double kMinRopeTheta = 1, kMaxRopeTheta = 1e10;
  static constexpr double kMinNormEps = 1e-12, kMaxNormEps = 1;
};

// A path ending in ".safetensors" is one file: every parameter (Hugging Face names), written
// atomically, with the config as "remat.*" metadata. Any other path is a model folder, written
// with save_tensor_folder: config.json in Hugging Face's format for the architecture (hf_config)
// and model.safetensors, sharded as model-0000k-of-0000n.safetensors + model.safetensors.index.json
// when the weights (in `dtype`) exceed max_shard_bytes.
// `dtype` is what the file holds: F32 (the default: the exact fp32 masters, what --resume needs) or
// BF16 (each weight rounded to nearest even, half the bytes, as Hugging Face ships models;
// config.json's torch_dtype says "bfloat16"). The model is unchanged; a BF16 save holds a bf16 copy
// of the weights (Category::Workspace, "save.bf16.<name>") while it writes.
// E.g. save_weights(model, "out", kDefaultShardBytes, DType::BF16).
void save_weights(const Model& model, const std::string& path, size_t max_shard_bytes = kDefaultShardBytes,
                  DType dtype = DType::F32);

// Loads weights into `model` from a .safetensors file or a model folder. Accepts a user's checkpoint
// as it is: F32, BF16 or F16 (converted); for GPT-2 an optional "transformer." prefix, the causal-mask
// buffers (attn.bias, attn.masked_bias) and the tied lm_head.weight are skipped; for LLaMA the
// rotary inv_freq buffers of older checkpoints are skipped. Every parameter must be present with
// its exact shape, nothing else may be in the file, and no value may be NaN or infinite. A folder's
// config.json must agree with its weights. Errors are one-line remat::Error with a hint.
void load_weights(Model& model, const std::string& path);

// The config of the weights at `path` (a .safetensors file or a model folder), dropout 0:
//  - a folder with config.json: config_from_hf of it (checked against the weights);
//  - a file with remat's metadata: that;
//  - a file without it: inferred from the tensor names and shapes; for a file with a config.json
//    beside it (same folder, same architecture), that config.json (checked against the weights).
//    GPT-2 without a config: heads = C/64 (Hugging Face's GPT-2 head size). LLaMA without a config:
//    the heads must be given (`heads`, from --heads; the key/value heads then follow from k_proj),
//    else a remat::Error asks for config.json or --heads; the block size is then 2048.
// `heads` > 0 is used only when the file does not say.
ModelConfig read_config(const std::string& path, int64_t heads = 0);

// The Hugging Face config.json of a config: GPT2LMHeadModel or LlamaForCausalLM fields.
nlohmann::json hf_config(const ModelConfig& c);
// The config of a Hugging Face config.json (GPT-2 or LLaMA). Throws remat::Error naming the key for
// a missing or ill-typed field, an unknown model_type, or a feature remat does not implement (tied
// LLaMA embeddings, RoPE scaling, biases in LLaMA, another activation). `where` names the file in
// messages.
ModelConfig config_from_hf(const nlohmann::json& j, const std::string& where = "config.json");

}  // namespace remat
