// GPT weights on disk as Hugging Face safetensors.
#pragma once
#include <string>

#include "model/model.h"

namespace remat {

// Writes every parameter (F32, Hugging Face names) atomically, with the config as metadata.
void save_weights(const Model& model, const std::string& path);
// Loads weights into `model`. Accepts a user's GPT-2 model.safetensors as it is: an optional
// "transformer." prefix, the causal-mask buffers (attn.bias, attn.masked_bias) and a tied
// lm_head.weight are skipped; every parameter must be present with its exact shape.
void load_weights(Model& model, const std::string& path);
// Reads the config stored by save_weights, or infers it from the tensor shapes (a Hugging Face file).
ModelConfig read_config(const std::string& path);

}  // namespace remat
