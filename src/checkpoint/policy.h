// Named-tensor policies for selective recomputation (JAX's save_only_these_names is the model).
// A policy answers, for each tensor an op saves, "keep it?". A dropped tensor is rebuilt in
// backward by replaying its producing op on tensors that are kept anyway. Policies apply to the
// blocks: the model says which names are block tensors and what they are called within a block
// (Model::named_policy); the embedding and the head always keep what they save.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "autograd/tape.h"

namespace remat {

class NamePolicy : public autograd::Policy {
 public:
  enum class Mode { SaveAll, SaveOnly, SaveAllBut };
  // A block tensor's name within its block ("h.3.attn.probs" -> "attn.probs"); nullopt outside
  // the blocks.
  using Scope = std::function<std::optional<std::string>(const std::string&)>;
  NamePolicy() = default;
  NamePolicy(Mode mode, std::vector<std::string> names, std::string label, Scope scope, std::string hint = "");

  bool keep(const std::string& tensor_name) const override;
  bool strict() const override { return mode_ == Mode::SaveAllBut; }
  std::string drop_hint() const override;
  Mode mode() const { return mode_; }
  bool keeps_all() const { return mode_ == Mode::SaveAll; }
  const std::string& label() const { return label_; }
  const std::vector<std::string>& names() const { return names_; }
  // Does `pattern` (a name within a block, a full name or a glob of either) select `tensor_name`?
  bool matches(const std::string& pattern, const std::string& tensor_name) const;

 private:
  bool matches_any(const std::string& name) const;
  Mode mode_ = Mode::SaveAll;
  std::vector<std::string> names_;
  std::string label_ = "none";
  Scope scope_;
  std::string hint_;
};

// "a,b,c" -> {"a", "b", "c"} (empty items rejected with a hint naming `flag`).
std::vector<std::string> split_names(const std::string& text, const std::string& flag);

}  // namespace remat
