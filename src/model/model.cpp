#include "model/model.h"

#include <cctype>
#include <cstring>

#include "core/error.h"
#include "kernels/bf16.h"
#include "kernels/philox.h"
#include "model/gpt.h"
#include "model/llama.h"

namespace remat {

const char* arch_name(Arch a) { return record::enum_name(a); }

Arch parse_arch(const std::string& name) {
  if (name == "gpt2" || name == "gpt-2" || name == "gpt") return Arch::GPT2;
  if (name == "llama") return Arch::Llama;
  throw Error("config", "unknown architecture '" + name + "'", "remat knows --arch gpt2 and --arch llama");
}

int64_t ModelConfig::mlp_hidden() const {
  if (hidden > 0) return hidden;
  if (arch == Arch::GPT2) return 4 * C;
  // LLaMA: 2/3 of 4C rounded up to a multiple (Meta's multiple_of, 256 at 7B and 13B size; smaller
  // for narrow models so that they stay near 8C/3).
  const int64_t m = std::max<int64_t>(1, std::min<int64_t>(256, C / 4));
  const int64_t h = 8 * C / 3;
  return (h + m - 1) / m * m;
}

void ModelConfig::validate() const {
  auto positive = [](int64_t v, const char* flag) {
    if (v <= 0)
      throw Error("config", std::string(flag) + " must be positive, got " + std::to_string(v),
                  std::string("pass ") + flag + " 1 or more");
  };
  positive(L, "--layers");
  positive(C, "--channels");
  positive(NH, "--heads");
  positive(T, "--seq");
  positive(V, "--vocab");
  if (KVH < 0) throw Error("config", "--kv-heads must be positive, got " + std::to_string(KVH), "e.g. --kv-heads 2");
  if (hidden < 0) throw Error("config", "--hidden must be positive, got " + std::to_string(hidden), "e.g. --hidden 704");
  if (C % NH != 0)
    throw Error("config", "--channels " + std::to_string(C) + " is not divisible by --heads " + std::to_string(NH),
                "pick C a multiple of NH, e.g. --channels " + std::to_string((C / NH + 1) * NH));
  if (arch == Arch::GPT2 && KVH != 0 && KVH != NH)
    throw Error("config", "GPT-2 has no grouped-query attention (--kv-heads " + std::to_string(KVH) + ")",
                "drop --kv-heads, or use --arch llama");
  if (NH % kv_heads() != 0)
    throw Error("config",
                "--kv-heads " + std::to_string(kv_heads()) + " does not divide --heads " + std::to_string(NH),
                "each key/value head serves NH/KVH query heads; pick a divisor of " + std::to_string(NH) +
                    ", e.g. --kv-heads " + std::to_string(NH % 2 == 0 ? NH / 2 : 1));
  if (arch == Arch::Llama && head_size() % 2 != 0)
    throw Error("config", "LLaMA's head size C/NH = " + std::to_string(head_size()) + " is odd",
                "rotary embeddings rotate pairs of channels: pick --channels and --heads with an even C/NH");
  if (V > (int64_t(1) << 31) - 1)
    throw Error("config", "--vocab " + std::to_string(V) + " does not fit int32 token ids", "use a smaller vocabulary");
  if (!(dropout >= 0.0f && dropout < 1.0f))
    throw Error("config", "--dropout must be in [0, 1), got " + std::to_string(dropout), "use e.g. --dropout 0.1");
  if (!(rope_theta > 0.0f)) throw Error("config", "--rope-theta must be positive", "LLaMA uses 10000");
  if (!(norm_eps > 0.0f)) throw Error("config", "the norm epsilon must be positive", "LLaMA uses 1e-5 or 1e-6");
  if (precision != DType::F32 && precision != DType::BF16)
    throw Error("config", "unknown precision", "use --precision fp32 or --precision bf16");
  if (fp32_residual && precision != DType::BF16)
    throw Error("config", "--fp32-residual keeps the residual stream fp32 under --precision bf16, and fp32 runs have it already",
                "add --precision bf16, or drop --fp32-residual");
}

std::string ModelConfig::describe() const {
  std::string s = std::string(arch_name(arch)) + " L=" + std::to_string(L) + " C=" + std::to_string(C) +
                  " NH=" + std::to_string(NH);
  if (arch == Arch::Llama)
    s += " KVH=" + std::to_string(kv_heads()) + " H=" + std::to_string(mlp_hidden());
  s += " T=" + std::to_string(T) + " V=" + std::to_string(V);
  if (precision == DType::BF16) s += fp32_residual ? " bf16 (fp32 residual)" : " bf16";
  return s;
}

namespace {
struct Preset {
  const char* name;
  ModelConfig cfg;
};
ModelConfig gpt(int64_t L, int64_t C, int64_t NH, int64_t T, int64_t V) {
  ModelConfig c;
  c.arch = Arch::GPT2;
  c.L = L; c.C = C; c.NH = NH; c.T = T; c.V = V;
  return c;
}
ModelConfig llama(int64_t L, int64_t C, int64_t NH, int64_t KVH, int64_t H, int64_t T, int64_t V) {
  ModelConfig c;
  c.arch = Arch::Llama;
  c.L = L; c.C = C; c.NH = NH; c.KVH = KVH; c.hidden = H; c.T = T; c.V = V;
  return c;
}
const std::vector<Preset>& presets() {
  static const std::vector<Preset> p = {
      {"tiny", gpt(2, 64, 4, 64, 256)},
      {"shakespeare", gpt(4, 128, 4, 128, 256)},
      {"small", gpt(12, 256, 4, 256, 256)},
      {"wide", gpt(12, 768, 12, 512, 8192)},
      {"gpt2", gpt(12, 768, 12, 1024, 50257)},
      {"gpt3-175b", gpt(96, 12288, 96, 2048, 50257)},
      // LLaMA: tiny for tests, shakespeare for learning, small at GPT-2-small's shape; the real
      // shapes (LLaMA-2 7B / 13B / 70B, 4096 positions, 32000 tokens) for `remat plan`.
      {"llama-tiny", llama(2, 64, 4, 2, 176, 64, 256)},
      {"llama-shakespeare", llama(4, 128, 4, 2, 352, 128, 256)},
      {"llama-small", llama(12, 256, 4, 4, 704, 256, 256)},
      {"llama-7b", llama(32, 4096, 32, 32, 11008, 4096, 32000)},
      {"llama-13b", llama(40, 5120, 40, 40, 13824, 4096, 32000)},
      {"llama-70b", llama(80, 8192, 64, 8, 28672, 4096, 32000)},
  };
  return p;
}
}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> n;
  for (const Preset& p : presets()) n.push_back(p.name);
  return n;
}

ModelConfig preset(const std::string& name) {
  for (const Preset& p : presets())
    if (name == p.name) return p.cfg;
  std::string names;
  for (auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
  throw Error("config", "unknown preset '" + name + "'", "choose one of: " + names);
}

StepRng step_rng(uint64_t seed, uint64_t step, uint64_t micro) {
  // One Philox draw mixes (seed, step, micro) into this micro-step's stream key.
  auto r = kernels::philox4x32(step, micro, seed ^ 0x243F6A8885A308D3ull);
  return {(uint64_t(r.v[0]) << 32) | r.v[1]};
}

size_t Model::add_param(const std::string& name, Shape shape, bool matmul) {
  Tensor lowp;
  if (matmul && cfg_.precision == DType::BF16) lowp = Tensor::zeros(shape, Category::Parameter, name + ".bf16", DType::BF16);
  params_.push_back({name, Tensor::zeros(shape, Category::Parameter, name),
                     Tensor::zeros(shape, Category::Gradient, "d" + name), std::move(lowp)});
  return params_.size() - 1;
}

void Model::refresh_lowp() {
  for (Param& p : params_)
    if (p.lowp.defined() && !p.lowp.shape_only())
      kernels::to_bf16_parallel(p.lowp.data_bf16(), p.value.data(), p.value.numel());
}

Param& Model::param(const std::string& name) {
  for (Param& p : params_)
    if (p.name == name) return p;
  throw Error("model", "no parameter named '" + name + "'");
}

int64_t Model::num_params() const {
  int64_t n = 0;
  for (const Param& p : params_) n += shape_numel(p.value.shape());
  return n;
}

void Model::zero_grad() {
  for (Param& p : params_)
    if (!p.grad.shape_only() && p.grad.resident()) std::memset(p.grad.data(), 0, p.grad.bytes());  // ZeRO-3 evicts
}

Tensor Model::loss(const Tensor& logits, std::span<const int32_t> targets, double count) const {
  return autograd::cross_entropy(logits, targets, count, "loss");
}

namespace {
std::optional<std::pair<int, std::string>> split_layer_name(const std::string& stem, const std::string& name) {
  if (name.compare(0, stem.size(), stem) != 0) return std::nullopt;
  size_t i = stem.size();
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) ++i;
  if (i == stem.size() || i >= name.size() || name[i] != '.' || i - stem.size() > 9) return std::nullopt;
  return std::make_pair(std::stoi(name.substr(stem.size(), i - stem.size())), name.substr(i + 1));
}
}  // namespace

std::optional<std::pair<int, std::string>> Model::split_name(const std::string& name) const {
  return split_layer_name(layer_stem(), name);
}

KVCache Model::make_kv_cache(int64_t capacity) const {
  REMAT_ASSERT(capacity > 0 && capacity <= cfg_.T, "a key/value cache holds 1 to block-size positions");
  KVCache c;
  const int64_t width = cfg_.kv_heads() * cfg_.head_size();
  for (int i = 0; i < num_layers(); ++i) {
    const std::string p = layer_prefix(i) + "kv_cache.";
    c.layers.push_back({Tensor::empty({capacity, width}, Category::KVCache, p + "k"),
                        Tensor::empty({capacity, width}, Category::KVCache, p + "v")});
  }
  return c;
}

std::vector<std::string> Model::policy_names() const {
  std::vector<std::string> n{"none"};
  for (const PolicyPreset& p : policy_presets()) n.push_back(p.name);
  return n;
}

bool Model::has_policy(const std::string& name) const {
  for (const std::string& n : policy_names())
    if (n == name) return true;
  return false;
}

NamePolicy Model::named_policy(NamePolicy::Mode mode, std::vector<std::string> names, std::string label) const {
  std::string droppable;
  for (const PolicyPreset& p : policy_presets())
    for (const std::string& d : p.drop) droppable += (droppable.empty() ? "" : ", ") + d;
  auto scope = [stem = layer_stem()](const std::string& n) -> std::optional<std::string> {
    auto s = split_layer_name(stem, n);
    if (!s) return std::nullopt;
    return s->second;
  };
  return NamePolicy(mode, std::move(names), std::move(label), scope,
                    "the " + std::string(arch_name(cfg_.arch)) + " block tensors its ops rebuild are " + droppable);
}

NamePolicy Model::policy(const std::string& name) const {
  if (name == "none") return NamePolicy();
  for (const PolicyPreset& p : policy_presets())
    if (p.name == name) return named_policy(NamePolicy::Mode::SaveAllBut, p.drop, p.name);
  std::string names;
  for (const std::string& n : policy_names()) names += (names.empty() ? "" : ", ") + n;
  throw Error("policy", "unknown policy '" + name + "' for " + arch_name(cfg_.arch),
              "choose " + names + ", or name tensors with --save-only / --save-all-but");
}

std::unique_ptr<Model> make_model(const ModelConfig& cfg) {
  cfg.validate();
  if (cfg.arch == Arch::Llama) return std::make_unique<Llama>(cfg);
  return std::make_unique<GPT>(cfg);
}

}  // namespace remat
