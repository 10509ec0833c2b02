#include "model/weights.h"

#include <map>
#include <set>

#include "core/error.h"
#include "core/safetensors.h"

namespace remat {

namespace {
std::string strip_prefix(const std::string& n) {
  const std::string p = "transformer.";
  return n.rfind(p, 0) == 0 ? n.substr(p.size()) : n;
}
bool ignorable(const std::string& n) {
  auto ends = [&](const std::string& s) { return n.size() >= s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0; };
  return ends(".attn.bias") || ends(".attn.masked_bias") || n == "lm_head.weight";
}
}  // namespace

void save_weights(const Model& model, const std::string& path) {
  std::vector<std::pair<std::string, const Tensor*>> ts;
  for (const Param& p : model.params()) ts.emplace_back(p.name, &p.value);
  const ModelConfig& c = model.config();
  std::map<std::string, std::string> meta{{"format", "pt"},
                                          {"remat.arch", arch_name(c.arch)},
                                          {"remat.KVH", std::to_string(c.kv_heads())},
                                          {"remat.hidden", std::to_string(c.mlp_hidden())},
                                          {"remat.L", std::to_string(c.L)},
                                          {"remat.C", std::to_string(c.C)},
                                          {"remat.NH", std::to_string(c.NH)},
                                          {"remat.T", std::to_string(c.T)},
                                          {"remat.V", std::to_string(c.V)}};
  save_safetensors(path, ts, meta);
}

void load_weights(Model& model, const std::string& path) {
  SafetensorsReader r(path);
  std::set<std::string> names;
  for (const Param& p : model.params()) names.insert(p.name);
  std::map<std::string, const SafetensorsEntry*> by_name;
  for (const auto& e : r.entries()) {
    const std::string n = strip_prefix(e.name);
    if (names.count(n) || !ignorable(n)) by_name[n] = &e;
  }
  std::set<std::string> used;
  for (Param& p : model.params()) {
    auto it = by_name.find(p.name);
    if (it == by_name.end())
      throw Error("weights", "'" + path + "' has no tensor '" + p.name + "'",
                  "is it a GPT-2 checkpoint with " + model.config().describe() + "?");
    if (it->second->shape != p.value.shape())
      throw Error("weights",
                  "'" + p.name + "' in '" + path + "' has shape " + shape_str(it->second->shape) + ", the model expects " +
                      shape_str(p.value.shape()),
                  "match --layers/--channels/--heads/--seq/--vocab to the file (model: " + model.config().describe() + ")");
    r.read_f32(*it->second, p.value.span());
    used.insert(p.name);
  }
  for (auto& [n, e] : by_name)
    if (!used.count(n))
      throw Error("weights", "'" + path + "' has a tensor '" + n + "' that this model does not use",
                  "the file is for a different architecture or depth than " + model.config().describe());
}

ModelConfig read_config(const std::string& path) {
  SafetensorsReader r(path);
  ModelConfig c;
  const auto& m = r.metadata();
  auto get = [&](const char* k, int64_t& v) {
    auto it = m.find(k);
    if (it != m.end()) v = std::stoll(it->second);
  };
  if (m.count("remat.L")) {
    get("remat.L", c.L); get("remat.C", c.C); get("remat.NH", c.NH); get("remat.T", c.T); get("remat.V", c.V);
    if (m.count("remat.arch")) c.arch = parse_arch(m.at("remat.arch"));
    if (c.arch == Arch::Llama) { get("remat.KVH", c.KVH); get("remat.hidden", c.hidden); }
    return c;
  }
  // A Hugging Face file: infer from shapes; heads are not stored (GPT-2 uses HS = 64).
  int64_t L = 0;
  for (const auto& e : r.entries()) {
    const std::string n = strip_prefix(e.name);
    if (n == "wte.weight" && e.shape.size() == 2) { c.V = e.shape[0]; c.C = e.shape[1]; }
    if (n == "wpe.weight" && e.shape.size() == 2) c.T = e.shape[0];
    if (n.rfind("h.", 0) == 0) L = std::max<int64_t>(L, std::stoll(n.substr(2, n.find('.', 2) - 2)) + 1);
  }
  c.L = L;
  c.NH = c.C % 64 == 0 ? c.C / 64 : 1;
  return c;
}

}  // namespace remat
