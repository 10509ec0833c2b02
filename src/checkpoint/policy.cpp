#include "checkpoint/policy.h"

#include <fnmatch.h>

#include <sstream>

#include "core/error.h"

namespace remat {

NamePolicy::NamePolicy(Mode mode, std::vector<std::string> names, std::string label, Scope scope, std::string hint)
    : mode_(mode), names_(std::move(names)), label_(std::move(label)), scope_(std::move(scope)), hint_(std::move(hint)) {}

std::string NamePolicy::drop_hint() const { return hint_.empty() ? autograd::Policy::drop_hint() : hint_; }

bool NamePolicy::matches(const std::string& p, const std::string& name) const {
  // A block tensor is matched by its name within the block ("attn.probs"), its full name
  // ("h.3.attn.probs") or a glob of either ("h.*.attn.probs").
  const std::optional<std::string> local = scope_ ? scope_(name) : std::nullopt;
  if (p == name || fnmatch(p.c_str(), name.c_str(), 0) == 0) return true;
  return local && (p == *local || fnmatch(p.c_str(), local->c_str(), 0) == 0);
}

bool NamePolicy::matches_any(const std::string& name) const {
  for (const std::string& p : names_)
    if (matches(p, name)) return true;
  return false;
}

bool NamePolicy::keep(const std::string& name) const {
  if (mode_ == Mode::SaveAll || !scope_ || !scope_(name)) return true;
  return mode_ == Mode::SaveOnly ? matches_any(name) : !matches_any(name);
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
