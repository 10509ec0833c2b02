// What weights.cpp and hf_config.cpp share: Hugging Face's names for what remat knows. Internal to
// those files.
#pragma once
#include "core/dtype.h"

namespace remat::weights_common {

inline constexpr const char* kKnown = "remat knows gpt2 (GPT2LMHeadModel) and llama (LlamaForCausalLM)";

// config.json's name for the dtype of the weights beside it (transformers' torch_dtype).
inline const char* torch_dtype(DType d) { return d == DType::BF16 ? "bfloat16" : "float32"; }

}  // namespace remat::weights_common
