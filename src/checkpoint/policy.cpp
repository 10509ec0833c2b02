#include "checkpoint/policy.h"

#include <fnmatch.h>

#include <sstream>

#include "core/error.h"

namespace remat {

NamePolicy::NamePolicy(Mode mode, std::vector<std::string> names, std::string label)
    : mode_(mode), names_(std::move(names)), label_(std::move(label)) {}

std::vector<std::string> NamePolicy::preset_names() { return {"none", "selective", "gelu", "norms"}; }

bool NamePolicy::is_preset(const std::string& name) {
  for (auto& n : preset_names())
    if (n == name) return true;
  return false;
}

NamePolicy NamePolicy::preset(const std::string& name) {
  if (name == "none") return {};
  if (name == "selective") return {Mode::SaveAllBut, {"attn.probs"}, "selective"};
  if (name == "gelu") return {Mode::SaveAllBut, {"mlp.gelu"}, "gelu"};
  if (name == "norms") return {Mode::SaveAllBut, {"ln_1", "ln_2"}, "norms"};
  throw Error("policy", "unknown policy '" + name + "'",
              "choose none, selective, gelu or norms, or name tensors with --save-only / --save-all-but");
}

bool NamePolicy::matches(const std::string& name) const {
  // "h.3.attn.probs" is matched by "attn.probs", "h.3.attn.probs" or a glob such as "h.*.attn.probs".
  const auto dot = name.find('.', 2);
  const std::string rest = dot == std::string::npos ? name : name.substr(dot + 1);
  for (const std::string& p : names_)
    if (p == name || p == rest || fnmatch(p.c_str(), name.c_str(), 0) == 0 || fnmatch(p.c_str(), rest.c_str(), 0) == 0)
      return true;
  return false;
}

bool NamePolicy::keep(const std::string& name) const {
  if (mode_ == Mode::SaveAll || name.rfind("h.", 0) != 0) return true;
  return mode_ == Mode::SaveOnly ? matches(name) : !matches(name);
}

std::vector<std::string> split_names(const std::string& text, const std::string& flag) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  if (out.empty())
    throw Error("policy", flag + " needs a comma-separated list of tensor names",
                "e.g. " + flag + " attn.probs,mlp.gelu (names as in the report's activation table)");
  return out;
}

}  // namespace remat
