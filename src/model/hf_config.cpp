// A model config as Hugging Face's config.json holds it (weights.h: hf_config, config_from_hf), and
// the bounds a config's numbers are held to in every file (record::check_limits).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/text.h"
#include "core/record.h"
#include "model/weights.h"
#include "model/weights_common.h"

namespace remat {

using weights_common::kKnown;
using weights_common::torch_dtype;

namespace {

using nlohmann::json;

// Shortest decimal that reads back as the same float ("1e-05", not 9.99999974737875e-06).
double tidy(float f) {
  for (int p = 6; p <= 9; ++p) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.*g", p, double(f));
    const double d = std::strtod(buf, nullptr);
    if (float(d) == f) return d;
  }
  return double(f);
}

// ---- config.json fields ----

std::string jtext(const json& v) {
  std::string s;
  try {
    s = v.dump();
  } catch (const json::exception&) {
    s = "(not UTF-8)";
  }
  return printable(s);
}

// A positive integer field, at most `max`; `dflt` when absent or null (required when dflt is nullopt).
int64_t jint(const json& j, const char* key, const std::string& where, std::optional<int64_t> dflt = std::nullopt,
             int64_t max = ConfigLimits::kMaxSize) {
  if (!j.contains(key) || j[key].is_null()) {
    if (dflt) return *dflt;
    throw Error("config", where + " has no \"" + key + "\"",
                "a Hugging Face config.json of this architecture has it; re-download or fix it");
  }
  const json& v = j[key];
  int64_t r = 0;
  bool ok = false;
  if (v.is_number_unsigned()) {
    ok = v.get<uint64_t>() <= uint64_t(std::numeric_limits<int64_t>::max());
    if (ok) r = int64_t(v.get<uint64_t>());
  } else if (v.is_number_integer()) {
    r = v.get<int64_t>();
    ok = true;
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    ok = std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e18;
    if (ok) r = int64_t(d);
  }
  if (!ok || r <= 0)
    throw Error("config", "\"" + std::string(key) + "\" in " + where + " is " + jtext(v) + ", not a positive integer",
                "fix " + where);
  if (r > max)
    throw Error("config", "\"" + std::string(key) + "\" in " + where + " is " + jtext(v) + ", above " +
                              std::to_string(max) + ", more than remat runs",
                "fix " + where);
  return r;
}


// A positive finite number field in [lo, hi]; `dflt` when absent or null.
double jnum(const json& j, const char* key, const std::string& where, double dflt, double lo, double hi) {
  if (!j.contains(key) || j[key].is_null()) return dflt;
  const json& v = j[key];
  if (!v.is_number() || !std::isfinite(v.get<double>()) || !(v.get<double>() > 0))
    throw Error("config", "\"" + std::string(key) + "\" in " + where + " is " + jtext(v) + ", not a positive number",
                "fix " + where);
  const double d = v.get<double>();
  if (d < lo || d > hi)
    throw Error("config", "\"" + std::string(key) + "\" in " + where + " is " + jtext(v) + ", outside " +
                              short_number(lo) + " to " + short_number(hi),
                "fix " + where);
  return d;
}

bool jbool(const json& j, const char* key, const std::string& where, bool dflt) {
  if (!j.contains(key) || j[key].is_null()) return dflt;
  if (!j[key].is_boolean())
    throw Error("config", "\"" + std::string(key) + "\" in " + where + " is " + jtext(j[key]) + ", not true or false",
                "fix " + where);
  return j[key].get<bool>();
}

std::string jstr(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return "";
  if (!j[key].is_string())
    throw Error("config", "\"" + std::string(key) + "\" in " + where + " is " + jtext(j[key]) + ", not a string",
                "fix " + where);
  return j[key].get<std::string>();
}

}  // namespace

// ---- Hugging Face config.json ----

json hf_config(const ModelConfig& c) {
  if (c.arch == Arch::GPT2) {
    return json{{"architectures", {"GPT2LMHeadModel"}},
                {"model_type", "gpt2"},
                {"n_layer", c.L},
                {"n_embd", c.C},
                {"n_head", c.NH},
                {"n_positions", c.T},
                {"n_ctx", c.T},
                {"vocab_size", c.V},
                {"n_inner", c.mlp_hidden() == 4 * c.C ? json(nullptr) : json(c.mlp_hidden())},
                {"activation_function", "gelu_new"},
                {"layer_norm_epsilon", 1e-5},
                {"resid_pdrop", tidy(c.dropout)},
                {"embd_pdrop", tidy(c.dropout)},
                {"attn_pdrop", tidy(c.dropout)},
                {"initializer_range", 0.02},
                {"tie_word_embeddings", true},
                {"torch_dtype", torch_dtype(DType::F32)}};
  }
  return json{{"architectures", {"LlamaForCausalLM"}},
              {"model_type", "llama"},
              {"num_hidden_layers", c.L},
              {"hidden_size", c.C},
              {"num_attention_heads", c.NH},
              {"num_key_value_heads", c.kv_heads()},
              {"head_dim", c.head_size()},
              {"intermediate_size", c.mlp_hidden()},
              {"max_position_embeddings", c.T},
              {"vocab_size", c.V},
              {"rope_theta", tidy(c.rope_theta)},
              {"rope_scaling", nullptr},
              {"rms_norm_eps", tidy(c.norm_eps)},
              {"hidden_act", "silu"},
              {"attention_bias", false},
              {"mlp_bias", false},
              {"attention_dropout", tidy(c.dropout)},
              {"tie_word_embeddings", false},
              {"initializer_range", 0.02},
              {"torch_dtype", torch_dtype(DType::F32)}};
}

ModelConfig config_from_hf(const json& j, const std::string& where) {
  if (!j.is_object()) throw Error("config", where + " is not a JSON object", "fix or re-download config.json");
  const std::string mt = jstr(j, "model_type", where);
  std::vector<std::string> archs;
  if (j.contains("architectures") && j["architectures"].is_array())
    for (const json& a : j["architectures"])
      if (a.is_string()) archs.push_back(a.get<std::string>());
  auto has = [&](const char* a) { return std::find(archs.begin(), archs.end(), a) != archs.end(); };
  std::optional<Arch> arch;
  if (mt == "gpt2") arch = Arch::GPT2;
  else if (mt == "llama") arch = Arch::Llama;
  else if (has("LlamaForCausalLM")) arch = Arch::Llama;
  else if (has("GPT2LMHeadModel")) arch = Arch::GPT2;
  if (!arch) {
    std::string what = !mt.empty() ? "model_type " + quote_name(mt)
                       : !archs.empty() ? "architectures " + jtext(j["architectures"])
                                        : std::string("no model_type");
    throw Error("config", where + " has " + what + ", not an architecture remat knows", kKnown);
  }

  // model_type naming one architecture over the other's fields: say so, not that a field is missing.
  const bool gpt2_keys = j.contains("n_layer") || j.contains("n_embd"),
             llama_keys = j.contains("num_hidden_layers") || j.contains("hidden_size");
  if (*arch != (gpt2_keys && !llama_keys ? Arch::GPT2 : llama_keys && !gpt2_keys ? Arch::Llama : *arch))
    throw Error("config",
                where + " says " + (mt.empty() ? "architectures " + jtext(j["architectures"]) : "model_type " + quote_name(mt)) +
                    " but has " + (gpt2_keys ? "GPT-2's fields (n_layer, n_embd)" : "LLaMA's fields (num_hidden_layers, hidden_size)"),
                std::string("fix ") + where + ": model_type " + (gpt2_keys ? "gpt2" : "llama") + " for these fields");

  ModelConfig c;
  c.arch = *arch;
  c.dropout = 0;
  if (c.arch == Arch::GPT2) {
    c.L = jint(j, "n_layer", where, std::nullopt, ConfigLimits::kMaxLayers);
    c.C = jint(j, "n_embd", where);
    c.NH = jint(j, "n_head", where);
    c.T = j.contains("n_positions") && !j["n_positions"].is_null() ? jint(j, "n_positions", where) : jint(j, "n_ctx", where);
    c.V = jint(j, "vocab_size", where);
    const int64_t H = jint(j, "n_inner", where, 0);
    c.hidden = H == 4 * c.C ? 0 : H;
    const double eps = jnum(j, "layer_norm_epsilon", where, 1e-5, ConfigLimits::kMinNormEps, ConfigLimits::kMaxNormEps);
    if (std::fabs(eps - 1e-5) > 1e-9)
      throw Error("config", where + " has layer_norm_epsilon " + jtext(j["layer_norm_epsilon"]) +
                                "; remat's GPT-2 layernorm uses 1e-5",
                  "remat supports GPT-2's standard layer_norm_epsilon 1e-05 only");
    const std::string act = jstr(j, "activation_function", where);
    if (!act.empty() && act != "gelu_new" && act != "gelu_pytorch_tanh")
      throw Error("config", where + " has activation_function " + quote_name(act) + "; remat's GPT-2 uses gelu_new (tanh GELU)",
                  "remat supports GPT-2's standard activation only");
  } else {
    c.L = jint(j, "num_hidden_layers", where, std::nullopt, ConfigLimits::kMaxLayers);
    c.C = jint(j, "hidden_size", where);
    c.NH = jint(j, "num_attention_heads", where);
    c.KVH = jint(j, "num_key_value_heads", where, c.NH);
    c.hidden = jint(j, "intermediate_size", where);
    c.T = jint(j, "max_position_embeddings", where);
    c.V = jint(j, "vocab_size", where);
    c.rope_theta = float(jnum(j, "rope_theta", where, 10000.0, ConfigLimits::kMinRopeTheta, ConfigLimits::kMaxRopeTheta));
    c.norm_eps = float(jnum(j, "rms_norm_eps", where, 1e-6, ConfigLimits::kMinNormEps, ConfigLimits::kMaxNormEps));  // transformers' LlamaConfig default
    if (jbool(j, "tie_word_embeddings", where, false))
      throw Error("config", where + " has tie_word_embeddings true; remat's LLaMA has its own lm_head.weight",
                  "remat trains untied LLaMA models only (Llama 2/3 7B and up); untie the checkpoint first");
    if (c.C % c.NH != 0)
      throw Error("config", where + ": hidden_size " + std::to_string(c.C) + " is not divisible by num_attention_heads " +
                                std::to_string(c.NH),
                  "fix " + where);
    if (j.contains("head_dim") && !j["head_dim"].is_null() && jint(j, "head_dim", where) != c.C / c.NH)
      throw Error("config", where + " has head_dim " + jtext(j["head_dim"]) + ", not hidden_size / num_attention_heads = " +
                                std::to_string(c.C / c.NH),
                  "remat's LLaMA needs head_dim = hidden_size / num_attention_heads");
    if (c.NH % c.KVH != 0)
      throw Error("config", where + ": num_key_value_heads " + std::to_string(c.KVH) +
                                " does not divide num_attention_heads " + std::to_string(c.NH),
                  "fix " + where);
    const std::string act = jstr(j, "hidden_act", where);
    if (!act.empty() && act != "silu")
      throw Error("config", where + " has hidden_act " + quote_name(act) + "; remat's LLaMA uses silu (SwiGLU)",
                  "remat supports LLaMA's standard activation only");
    if (j.contains("rope_scaling") && !j["rope_scaling"].is_null())
      throw Error("config", where + " has rope_scaling " + jtext(j["rope_scaling"]) + "; remat's RoPE has no scaling",
                  "remat supports plain RoPE (Llama 1/2/3.0 style) only");
    if (jbool(j, "attention_bias", where, false) || jbool(j, "mlp_bias", where, false))
      throw Error("config", where + " has attention_bias or mlp_bias true; remat's LLaMA has no biases",
                  "remat supports bias-free LLaMA models only");
  }
  try {
    c.validate();
  } catch (const Error& e) {
    // validate() speaks of flags; these values are the file's: its message in the file's names.
    std::string w = e.what();
    if (w.rfind("[", 0) == 0 && w.find("] ") != std::string::npos) w = w.substr(w.find("] ") + 2);
    if (const size_t h = w.rfind(" (hint: "); h != std::string::npos) w = w.substr(0, h);
    const bool g = c.arch == Arch::GPT2;
    for (const auto& [flag, key] : {std::pair<std::string, std::string>{"--kv-heads", "num_key_value_heads"},
                                    {"--channels", g ? "n_embd" : "hidden_size"},
                                    {"--heads", g ? "n_head" : "num_attention_heads"},
                                    {"--layers", g ? "n_layer" : "num_hidden_layers"},
                                    {"--seq", g ? "n_positions" : "max_position_embeddings"},
                                    {"--vocab", "vocab_size"}, {"--hidden", g ? "n_inner" : "intermediate_size"}})
      for (size_t at = w.find(flag); at != std::string::npos; at = w.find(flag, at + key.size()))
        if (at + flag.size() == w.size() ||
            (!std::isalnum(static_cast<unsigned char>(w[at + flag.size()])) && w[at + flag.size()] != '-'))
          w.replace(at, flag.size(), key);
        else
          at += 1;
    throw Error("config", where + " describes a model remat cannot build: " + w, "fix " + where);
  }
  return c;
}

}  // namespace remat

namespace remat::record {

void check_limits(const ModelConfig& c, const std::string& path) {
  // Upper bounds only, and the range of a positive real: ModelConfig::validate() refuses zeros and
  // negatives with its own words.
  using L = ConfigLimits;
  auto at = [&](const char* key) { return path.empty() ? std::string(key) : path + "." + key; };
  for (const auto& [key, v, hi] : {std::tuple<const char*, int64_t, int64_t>{"layers", c.L, L::kMaxLayers},
                                   {"channels", c.C, L::kMaxSize}, {"heads", c.NH, L::kMaxSize},
                                   {"kv_heads", c.KVH, L::kMaxSize}, {"block_size", c.T, L::kMaxSize},
                                   {"vocab", c.V, L::kMaxSize}, {"hidden", c.hidden, L::kMaxSize}})
    if (v > hi) throw FieldError(at(key), "must be at most " + std::to_string(hi) + ", got " + std::to_string(v));
  for (const auto& [key, v, lo, hi] :
       {std::tuple<const char*, double, double, double>{"rope_theta", c.rope_theta, L::kMinRopeTheta, L::kMaxRopeTheta},
        {"norm_eps", c.norm_eps, L::kMinNormEps, L::kMaxNormEps}})
    if (v > 0 && (v < lo || v > hi))
      throw FieldError(at(key), "must be " + short_number(lo) + " to " + short_number(hi) + ", got " + short_number(v));
}

}  // namespace remat::record
