// Named-tensor policies for selective recomputation (JAX's save_only_these_names is the model).
// A policy answers, for each tensor an op saves, "keep it?". A dropped tensor is rebuilt in
// backward by replaying its producing op on tensors that are kept anyway. Policies apply to the
// blocks ("h.N.*" names); the embedding and the head always keep what they save.
#pragma once
#include <string>
#include <vector>

#include "autograd/tape.h"

namespace remat {

class NamePolicy : public autograd::Policy {
 public:
  enum class Mode { SaveAll, SaveOnly, SaveAllBut };
  NamePolicy() = default;
  NamePolicy(Mode mode, std::vector<std::string> names, std::string label);

  // Presets:
  //   selective: drop attn.probs, the B*NH*T^2 term (Megatron-LM); backward redoes QK^T + softmax
  //   gelu:      drop mlp.gelu, rebuilt from its input (llm.c's recompute=1)
  //   norms:     drop the ln_1 / ln_2 outputs, rebuilt from the saved input, mean and rstd
  //   none:      keep everything
  static NamePolicy preset(const std::string& name);
  static std::vector<std::string> preset_names();
  static bool is_preset(const std::string& name);

  bool keep(const std::string& tensor_name) const override;
  bool strict() const override { return mode_ == Mode::SaveAllBut; }
  Mode mode() const { return mode_; }
  bool keeps_all() const { return mode_ == Mode::SaveAll; }
  const std::string& label() const { return label_; }

 private:
  bool matches(const std::string& name) const;
  Mode mode_ = Mode::SaveAll;
  std::vector<std::string> names_;
  std::string label_ = "none";
};

// "a,b,c" -> {"a", "b", "c"} (empty items rejected with a hint naming `flag`).
std::vector<std::string> split_names(const std::string& text, const std::string& flag);

}  // namespace remat
