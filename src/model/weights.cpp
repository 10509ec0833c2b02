#include "model/weights.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "core/safetensors.h"
#include "core/tensor_store.h"
#include "kernels/bf16.h"
#include "model/weights_common.h"

namespace remat {

using weights_common::kKnown;
using weights_common::torch_dtype;

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kMixed = "config.json and the weights are from different models; re-download the folder or fix config.json";

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }
bool ends_with(const std::string& s, const std::string& e) {
  return s.size() >= e.size() && s.compare(s.size() - e.size(), e.size(), e) == 0;
}

// The block index N of "<stem>N.rest", if `n` is such a name.
std::optional<int64_t> layer_index(const std::string& n, const std::string& stem) {
  if (!starts_with(n, stem)) return std::nullopt;
  const size_t b = stem.size(), e = n.find('.', b);
  if (e == std::string::npos || e == b || e - b > 9) return std::nullopt;
  int64_t v = 0;
  for (size_t i = b; i < e; ++i) {
    if (n[i] < '0' || n[i] > '9') return std::nullopt;
    v = v * 10 + (n[i] - '0');
  }
  return v;
}

const char* stem_of(Arch a) { return a == Arch::GPT2 ? "h." : "model.layers."; }

// Tensors that are not parameters: GPT-2's causal-mask buffers and tied head, LLaMA's rotary buffers.
bool ignorable(Arch a, const std::string& n) {
  if (a == Arch::GPT2) return ends_with(n, ".attn.bias") || ends_with(n, ".attn.masked_bias") || n == "lm_head.weight";
  return ends_with(n, ".rotary_emb.inv_freq");
}

// The architecture of a set of tensor names, or nullopt.
std::optional<Arch> arch_of_names(const std::vector<std::string>& names) {
  for (const std::string& raw : names) {
    const std::string n = starts_with(raw, "transformer.") ? raw.substr(12) : raw;
    if (n == "model.embed_tokens.weight" || starts_with(n, "model.layers.")) return Arch::Llama;
    if (n == "wte.weight" || n == "wpe.weight" || layer_index(n, "h.")) return Arch::GPT2;
  }
  return std::nullopt;
}

// Model parameter name -> name in the store, for every tensor that is not ignorable (GPT-2's
// optional "transformer." prefix stripped).
std::map<std::string, std::string> tensor_map(const TensorStore& s, Arch a) {
  std::map<std::string, std::string> m;
  for (const std::string& raw : s.names()) {
    const std::string n = a == Arch::GPT2 && starts_with(raw, "transformer.") ? raw.substr(12) : raw;
    if (ignorable(a, n)) continue;
    auto [it, inserted] = m.emplace(n, raw);
    if (!inserted)
      throw Error("weights", "'" + s.path() + "' holds " + quote_name(n) + " twice, as " + quote_name(it->second) + " and " + quote_name(raw),
                  "the checkpoint mixes two naming schemes; re-save it");
  }
  return m;
}

int64_t num_layers_in(const std::map<std::string, std::string>& m, Arch a) {
  int64_t L = 0;
  for (const auto& [n, raw] : m)
    if (auto i = layer_index(n, stem_of(a))) L = std::max(L, *i + 1);
  return L;
}

// ---- remat metadata ----

int64_t meta_int(const std::map<std::string, std::string>& m, const std::string& key, const std::string& path,
                 int64_t dflt) {
  auto it = m.find(key);
  if (it == m.end()) return dflt;
  const std::string& s = it->second;
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty())
    throw Error("weights", "metadata " + quote_name(key) + " of '" + path + "' is " + quote_name(s) + ", not an integer",
                "the file is corrupt; re-save it");
  return v;
}

float meta_float(const std::map<std::string, std::string>& m, const std::string& key, const std::string& path,
                 float dflt) {
  auto it = m.find(key);
  if (it == m.end()) return dflt;
  const std::string& s = it->second;
  char* end = nullptr;
  const double d = s.empty() ? NAN : std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(d) || !(d > 0))
    throw Error("weights", "metadata " + quote_name(key) + " of '" + path + "' is " + quote_name(s) + ", not a positive number",
                "the file is corrupt; re-save it");
  return float(d);
}

// ---- inference from tensors ----

const SafetensorsEntry& need(const TensorStore& s, const std::map<std::string, std::string>& m, const std::string& name,
                             size_t rank) {
  auto it = m.find(name);
  if (it == m.end())
    throw Error("weights", "'" + s.path() + "' has no tensor " + quote_name(name) + ", so its model cannot be inferred",
                "give a complete checkpoint, or a Hugging Face folder with its config.json");
  const SafetensorsEntry& e = s.at(it->second);
  if (e.shape.size() != rank)
    throw Error("weights", "tensor " + quote_name(name) + " in '" + s.path() + "' has shape " + shape_str(e.shape) + ", not " +
                               std::to_string(rank) + "-D",
                "is it a GPT-2 or LLaMA checkpoint?");
  return e;
}

ModelConfig infer(const TensorStore& s, int64_t heads) {
  const auto arch = arch_of_names(s.names());
  if (!arch)
    throw Error("weights",
                "cannot tell the architecture of '" + s.path() +
                    "': it has neither wte.weight (GPT-2) nor model.embed_tokens.weight (LLaMA)",
                std::string(kKnown) + "; a model folder needs its config.json");
  const auto m = tensor_map(s, *arch);
  ModelConfig c;
  c.arch = *arch;
  c.L = num_layers_in(m, *arch);
  if (c.L == 0)
    throw Error("weights", "'" + s.path() + "' holds no transformer block (" + stem_of(*arch) + "0...)",
                "give a complete checkpoint");
  if (*arch == Arch::GPT2) {
    const auto& wte = need(s, m, "wte.weight", 2);
    c.V = wte.shape[0];
    c.C = wte.shape[1];
    c.T = need(s, m, "wpe.weight", 2).shape[0];
    if (heads <= 0)  // no guess: a head count that is wrong loads and trains, silently, another model
      throw Error("weights",
                  "'" + s.path() + "' holds a GPT-2 without config.json: its number of attention heads cannot be known",
                  "put the model's config.json beside the weights (a Hugging Face folder), or pass --heads N" +
                      (c.C % 64 == 0 ? " (OpenAI's GPT-2 checkpoints use 64 channels a head: --heads " +
                                           std::to_string(c.C / 64) + " here)"
                                     : std::string()));
    c.NH = heads;
    if (c.C % c.NH != 0)
      throw Error("config", "--heads " + std::to_string(heads) + " does not divide the width " + std::to_string(c.C) +
                                " of '" + s.path() + "'",
                  "pass the model's real head count, or use its config.json");
    const int64_t H = need(s, m, "h.0.mlp.c_fc.weight", 2).shape[1];
    c.hidden = H == 4 * c.C ? 0 : H;
    return c;
  }
  const auto& emb = need(s, m, "model.embed_tokens.weight", 2);
  c.V = emb.shape[0];
  c.C = emb.shape[1];
  if (heads <= 0)
    throw Error("weights",
                "'" + s.path() + "' holds a LLaMA without config.json: its number of attention heads cannot be known",
                "put the model's config.json beside the weights (a Hugging Face folder), or pass --heads N");
  c.NH = heads;
  if (c.C % c.NH != 0)
    throw Error("config", "--heads " + std::to_string(heads) + " does not divide the width " + std::to_string(c.C) +
                              " of '" + s.path() + "'",
                "pass the model's real head count, or use its config.json");
  const int64_t HS = c.C / c.NH;
  const int64_t kr = need(s, m, "model.layers.0.self_attn.k_proj.weight", 2).shape[0];
  if (kr % HS != 0)
    throw Error("config", "--heads " + std::to_string(heads) + " gives head size " + std::to_string(HS) +
                              ", which does not divide k_proj's " + std::to_string(kr) + " rows in '" + s.path() + "'",
                "pass the model's real head count, or use its config.json");
  c.KVH = kr / HS;
  c.hidden = need(s, m, "model.layers.0.mlp.gate_proj.weight", 2).shape[0];
  c.T = 2048;
  c.norm_eps = 1e-5f;
  c.rope_theta = 10000.0f;
  return c;
}

// Throws when the config (from `cfg_file`) disagrees with the weights in `s`: layer count, a
// missing tensor, a shape.
void check_against(const ModelConfig& c, const TensorStore& s, const std::string& cfg_file) {
  const auto m = tensor_map(s, c.arch);
  const int64_t L = num_layers_in(m, c.arch);
  if (L != c.L)
    throw Error("weights",
                "'" + cfg_file + "' says " + std::to_string(c.L) + " layers (" +
                    (c.arch == Arch::GPT2 ? "n_layer" : "num_hidden_layers") + ") but the weights in '" + s.path() +
                    "' hold " + std::to_string(L),
                kMixed);
  std::unique_ptr<Model> model;
  {
    ShapeOnlyScope dry;
    model = make_model(c);
  }
  for (const Param& p : model->params()) {
    auto it = m.find(p.name);
    if (it == m.end())
      throw Error("weights",
                  "'" + cfg_file + "' describes " + c.describe() + " but the weights in '" + s.path() +
                      "' have no tensor " + quote_name(p.name),
                  kMixed);
    const SafetensorsEntry& e = s.at(it->second);
    if (e.shape != p.value.shape())
      throw Error("weights",
                  "'" + cfg_file + "' (" + c.describe() + ") implies " + quote_name(p.name) + " of shape " +
                      shape_str(p.value.shape()) + " but the weights in '" + s.path() + "' hold " + shape_str(e.shape),
                  kMixed);
  }
}

json parse_config_file(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error("config", "cannot read '" + file + "'", "check its permissions");
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    json j = json::parse(ss.str());
    if (!j.is_object()) throw Error("config", "'" + file + "' is not a JSON object", "fix or re-download config.json");
    return j;
  } catch (const json::exception& e) {
    std::string w = e.what();
    if (size_t b = w.find("] "); b != std::string::npos) w = w.substr(b + 2);
    throw Error("config", "'" + file + "' is not valid JSON: " + printable(w), "fix or re-download config.json");
  }
}

std::string config_path(const TensorStore& s) { return (fs::path(s.path()) / "config.json").string(); }

}  // namespace

// ---- files and folders ----

void save_weights(const Model& model, const std::string& path, size_t max_shard_bytes, DType dtype) {
  // The tensors written: the parameters themselves, or copies in `dtype` (fp32 -> bf16 rounds to
  // nearest even).
  std::vector<Tensor> copies;
  copies.reserve(model.params().size());
  std::vector<std::pair<std::string, const Tensor*>> ts;
  for (const Param& p : model.params()) {
    if (p.value.dtype() == dtype) {
      ts.emplace_back(p.name, &p.value);
      continue;
    }
    Tensor& b = copies.emplace_back(Tensor::empty(p.value.shape(), Category::Workspace,
                                                  std::string("save.") + dtype_name(dtype) + "." + p.name, dtype));
    if (dtype == DType::BF16)
      kernels::to_bf16_parallel(b.data_bf16(), p.value.data(), p.value.numel());
    else
      kernels::to_float_parallel(b.data(), p.value.data_bf16(), p.value.numel());
    ts.emplace_back(p.name, &b);
  }
  const ModelConfig& c = model.config();
  if (!ends_with(path, ".safetensors")) {
    json cfg = hf_config(c);
    cfg["torch_dtype"] = torch_dtype(dtype);
    save_tensor_folder(path, ts, cfg, max_shard_bytes, {{"format", "pt"}});
    return;
  }
  char theta[32], eps[32];
  std::snprintf(theta, sizeof theta, "%.9g", double(c.rope_theta));
  std::snprintf(eps, sizeof eps, "%.9g", double(c.norm_eps));
  std::map<std::string, std::string> meta{{"format", "pt"},
                                          {"remat.arch", arch_name(c.arch)},
                                          {"remat.KVH", std::to_string(c.kv_heads())},
                                          {"remat.hidden", std::to_string(c.mlp_hidden())},
                                          {"remat.L", std::to_string(c.L)},
                                          {"remat.C", std::to_string(c.C)},
                                          {"remat.NH", std::to_string(c.NH)},
                                          {"remat.T", std::to_string(c.T)},
                                          {"remat.V", std::to_string(c.V)},
                                          {"remat.rope_theta", theta},
                                          {"remat.norm_eps", eps}};
  save_safetensors(path, ts, meta);
}

void load_weights(Model& model, const std::string& path) {
  const TensorStore s(path);
  const Arch arch = model.config().arch;
  if (s.has_config()) check_against(config_from_hf(s.config(), "'" + config_path(s) + "'"), s, config_path(s));
  const auto m = tensor_map(s, arch);
  std::set<std::string> used;
  std::vector<float> buf;
  for (Param& p : model.params()) {
    auto it = m.find(p.name);
    if (it == m.end())
      throw Error("weights", "'" + path + "' has no tensor " + quote_name(p.name),
                  "is it a checkpoint of " + model.config().describe() + "?");
    const SafetensorsEntry& e = s.at(it->second);
    if (e.shape != p.value.shape())
      throw Error("weights",
                  e.dtype + " tensor " + quote_name(it->second) + " in '" + s.file_of(it->second) + "' has shape " +
                      shape_str(e.shape) + " but the model (" + model.config().describe() + ") expects " +
                      shape_str(p.value.shape()),
                  "the weights are for another model: drop the model flags that differ from the file "
                  "(--layers/--channels/--heads/--kv-heads/--hidden/--vocab/--block-size) or load matching weights");
    s.read_f32(it->second, p.value.span());
    const float* d = p.value.data();
    for (int64_t i = 0, n = p.value.numel(); i < n; ++i)
      if (!std::isfinite(d[i]))
        throw Error("weights",
                    "tensor " + quote_name(it->second) + " in '" + s.file_of(it->second) + "' holds " +
                        (std::isnan(d[i]) ? "NaN" : "Inf") + " (element " + std::to_string(i) + ")",
                    "the checkpoint is corrupt or from a diverged run; use another one");
    used.insert(p.name);
  }
  for (const auto& [n, raw] : m)
    if (!used.count(n))
      throw Error("weights", "'" + path + "' has a tensor " + quote_name(raw) + " that this model does not use",
                  "the file is for a different architecture or depth than " + model.config().describe());
  model.refresh_lowp();  // --precision bf16: the matmul copies follow the loaded masters
}

ModelConfig read_config(const std::string& path, int64_t heads) {
  const TensorStore s(path);
  if (s.has_config()) {
    ModelConfig c = config_from_hf(s.config(), "'" + config_path(s) + "'");
    check_against(c, s, config_path(s));
    return c;
  }
  const auto& meta = s.metadata();
  if (meta.count("remat.L")) {
    ModelConfig c;
    c.L = meta_int(meta, "remat.L", path, c.L);
    c.C = meta_int(meta, "remat.C", path, c.C);
    c.NH = meta_int(meta, "remat.NH", path, c.NH);
    c.T = meta_int(meta, "remat.T", path, c.T);
    c.V = meta_int(meta, "remat.V", path, c.V);
    if (meta.count("remat.arch")) c.arch = parse_arch(meta.at("remat.arch"));
    if (c.arch == Arch::Llama) {
      c.KVH = meta_int(meta, "remat.KVH", path, 0);
      c.hidden = meta_int(meta, "remat.hidden", path, 0);
      c.rope_theta = meta_float(meta, "remat.rope_theta", path, c.rope_theta);
      c.norm_eps = meta_float(meta, "remat.norm_eps", path, c.norm_eps);
    } else {
      const int64_t H = meta_int(meta, "remat.hidden", path, 0);
      c.hidden = H == 4 * c.C ? 0 : H;
    }
    try {
      c.validate();
    } catch (const Error& e) {
      throw Error("weights", "the metadata of '" + path + "' describes an invalid model: " + e.what(),
                  "the file is corrupt; re-save it");
    }
    return c;
  }
  if (!s.is_folder()) {
    // A Hugging Face file with its config.json beside it.
    std::error_code ec;
    const fs::path parent = fs::path(path).parent_path();
    const std::string beside = ((parent.empty() ? fs::path(".") : parent) / "config.json").string();
    if (fs::is_regular_file(beside, ec)) {
      ModelConfig c = config_from_hf(parse_config_file(beside), "'" + beside + "'");
      check_against(c, s, beside);
      return c;
    }
  }
  return infer(s, heads);
}

}  // namespace remat
