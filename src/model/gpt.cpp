#include "model/gpt.h"

#include <cmath>
#include <cstring>
#include <random>

#include "core/error.h"
#include "kernels/philox.h"

namespace remat {

using autograd::AttentionKind;

void GPTConfig::validate() const {
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
  if (C % NH != 0)
    throw Error("config", "--channels " + std::to_string(C) + " is not divisible by --heads " + std::to_string(NH),
                "pick C a multiple of NH, e.g. --channels " + std::to_string((C / NH + 1) * NH));
  if (V > 65536) throw Error("config", "--vocab " + std::to_string(V) + " exceeds 65536", "token files hold uint16 tokens");
  if (!(dropout >= 0.0f && dropout < 1.0f))
    throw Error("config", "--dropout must be in [0, 1), got " + std::to_string(dropout), "use e.g. --dropout 0.1");
}

std::string GPTConfig::describe() const {
  return "L=" + std::to_string(L) + " C=" + std::to_string(C) + " NH=" + std::to_string(NH) + " T=" +
         std::to_string(T) + " V=" + std::to_string(V);
}

int64_t GPTConfig::num_params() const {
  const int64_t per_block = 2 * C + (C * 3 * C + 3 * C) + (C * C + C) + 2 * C + (C * 4 * C + 4 * C) + (4 * C * C + C);
  return V * C + T * C + L * per_block + 2 * C;
}

std::vector<std::string> preset_names() { return {"tiny", "small", "shakespeare", "wide", "gpt2"}; }

GPTConfig preset(const std::string& name) {
  GPTConfig c;
  if (name == "tiny") { c.L = 2; c.C = 64; c.NH = 4; c.T = 64; c.V = 256; }
  else if (name == "shakespeare") { c.L = 4; c.C = 128; c.NH = 4; c.T = 128; c.V = 256; }
  else if (name == "small") { c.L = 12; c.C = 256; c.NH = 4; c.T = 256; c.V = 256; }
  else if (name == "wide") { c.L = 12; c.C = 768; c.NH = 12; c.T = 512; c.V = 8192; }
  else if (name == "gpt2") { c.L = 12; c.C = 768; c.NH = 12; c.T = 1024; c.V = 50257; }
  else {
    std::string names;
    for (auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
    throw Error("config", "unknown preset '" + name + "'", "choose one of: " + names);
  }
  return c;
}

StepRng step_rng(uint64_t seed, uint64_t step, uint64_t micro) {
  // One Philox draw mixes (seed, step, micro) into this micro-step's stream key.
  auto r = kernels::philox4x32(step, micro, seed ^ 0x243F6A8885A308D3ull);
  return {(uint64_t(r.v[0]) << 32) | r.v[1]};
}

GPT::GPT(const GPTConfig& cfg) : cfg_(cfg) {
  cfg_.validate();
  const int64_t C = cfg.C;
  auto add = [&](const std::string& name, Shape shape) {
    params_.push_back({name, Tensor::zeros(shape, Category::Parameter, name),
                       Tensor::zeros(shape, Category::Gradient, "d" + name)});
  };
  add("wte.weight", {cfg.V, C});
  add("wpe.weight", {cfg.T, C});
  for (int64_t i = 0; i < cfg.L; ++i) {
    const std::string p = "h." + std::to_string(i) + ".";
    add(p + "ln_1.weight", {C});
    add(p + "ln_1.bias", {C});
    add(p + "attn.c_attn.weight", {C, 3 * C});
    add(p + "attn.c_attn.bias", {3 * C});
    add(p + "attn.c_proj.weight", {C, C});
    add(p + "attn.c_proj.bias", {C});
    add(p + "ln_2.weight", {C});
    add(p + "ln_2.bias", {C});
    add(p + "mlp.c_fc.weight", {C, 4 * C});
    add(p + "mlp.c_fc.bias", {4 * C});
    add(p + "mlp.c_proj.weight", {4 * C, C});
    add(p + "mlp.c_proj.bias", {C});
  }
  add("ln_f.weight", {C});
  add("ln_f.bias", {C});
  // Pointers into params_ (no further push_back, so they stay valid).
  size_t k = 0;
  wte_ = &params_[k++].value;
  wpe_ = &params_[k++].value;
  for (int64_t i = 0; i < cfg.L; ++i) {
    BlockParams b{};
    const Tensor** slots[] = {&b.ln1w, &b.ln1b, &b.attnw, &b.attnb, &b.projw, &b.projb,
                              &b.ln2w, &b.ln2b, &b.fcw,   &b.fcb,   &b.mprojw, &b.mprojb};
    for (auto* s : slots) *s = &params_[k++].value;
    blocks_.push_back(b);
  }
  lnfw_ = &params_[k++].value;
  lnfb_ = &params_[k++].value;
  init(0);
}

void GPT::init(uint64_t seed) {
  std::mt19937_64 gen(seed);
  const float proj_std = 0.02f / std::sqrt(2.0f * float(cfg_.L));
  for (Param& p : params_) {
    const std::string& n = p.name;
    auto ends = [&](const char* s) { return n.size() >= std::strlen(s) && n.compare(n.size() - std::strlen(s), std::string::npos, s) == 0; };
    float* d = p.value.data();
    const int64_t N = p.value.numel();
    if (ends("ln_1.weight") || ends("ln_2.weight") || ends("ln_f.weight")) {
      for (int64_t i = 0; i < N; ++i) d[i] = 1.0f;
    } else if (ends(".bias")) {
      for (int64_t i = 0; i < N; ++i) d[i] = 0.0f;
    } else {
      std::normal_distribution<float> dist(0.0f, ends("c_proj.weight") ? proj_std : 0.02f);
      for (int64_t i = 0; i < N; ++i) d[i] = dist(gen);
    }
  }
}

Param& GPT::param(const std::string& name) {
  for (Param& p : params_)
    if (p.name == name) return p;
  throw Error("model", "no parameter named '" + name + "'");
}

void GPT::zero_grad() {
  for (Param& p : params_) std::memset(p.grad.data(), 0, p.grad.bytes());
}

Tensor GPT::embed(std::span<const int32_t> tokens, int64_t B, int64_t T, const StepRng& rng) const {
  if (T > cfg_.T)
    throw Error("model", "sequence length " + std::to_string(T) + " exceeds the block size " + std::to_string(cfg_.T),
                "use --seq <= " + std::to_string(cfg_.T));
  Tensor x = autograd::embedding(tokens, *wte_, *wpe_, B, T, "emb");
  return autograd::dropout(x, rng.train ? cfg_.dropout : 0.0f, rng.site(0), "emb.drop");
}

Tensor GPT::block(int i, const Tensor& x, const StepRng& rng) const {
  namespace ag = autograd;
  const BlockParams& w = blocks_.at(i);
  const std::string p = "h." + std::to_string(i) + ".";
  const float pd = rng.train ? cfg_.dropout : 0.0f;
  const uint64_t site = 1 + 3 * uint64_t(i);
  Tensor h = ag::layernorm(x, *w.ln1w, *w.ln1b, p + "ln_1");                      // (B, T, C)
  Tensor qkv = ag::linear(h, *w.attnw, *w.attnb, p + "attn.c_attn");              // (B, T, 3C)
  Tensor a = ag::attention(qkv, cfg_.NH, pd, rng.site(site), cfg_.attention, p + "attn");  // (B, T, C)
  Tensor o = ag::linear(a, *w.projw, *w.projb, p + "attn.c_proj");                // (B, T, C)
  o = ag::dropout(o, pd, rng.site(site + 1), p + "attn.drop");
  Tensor r = ag::add(x, o, p + "res_1");                                          // (B, T, C)
  h = ag::layernorm(r, *w.ln2w, *w.ln2b, p + "ln_2");                             // (B, T, C)
  h = ag::linear(h, *w.fcw, *w.fcb, p + "mlp.c_fc");                              // (B, T, 4C)
  h = ag::gelu(h, p + "mlp.gelu");                                                // (B, T, 4C)
  h = ag::linear(h, *w.mprojw, *w.mprojb, p + "mlp.c_proj");                      // (B, T, C)
  h = ag::dropout(h, pd, rng.site(site + 2), p + "mlp.drop");
  return ag::add(r, h, p + "res_2");                                              // (B, T, C)
}

Tensor GPT::logits(const Tensor& xL) const {
  Tensor h = autograd::layernorm(xL, *lnfw_, *lnfb_, "ln_f");
  return autograd::linear_nt(h, *wte_, "lm_head");  // (B, T, V)
}

Tensor GPT::loss(const Tensor& logits, std::span<const int32_t> targets, double count) const {
  return autograd::cross_entropy(logits, targets, count, "loss");
}

}  // namespace remat
