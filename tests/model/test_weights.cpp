// Weights on disk: remat's own files and Hugging Face model folders (config.json + one file or
// shards) of both architectures, the config.json mapping, and the errors for inconsistent input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include "core/safetensors.h"
#include "core/tensor_store.h"
#include "model/weights.h"
#include "test_util.h"

namespace {

using namespace remat;
namespace fs = std::filesystem;
using nlohmann::json;
using remat::testing_util::error_of;

class Weights : public remat::testing_util::TempDirTest {
 protected:
  void write(const std::string& name, const std::string& text) const {
    std::ofstream f(p(name), std::ios::binary);
    f << text;
  }
};

ModelConfig gpt_cfg() {
  ModelConfig c;
  c.arch = Arch::GPT2;
  c.L = 3; c.C = 64; c.NH = 2; c.T = 16; c.V = 40;
  return c;
}
ModelConfig llama_cfg() {
  ModelConfig c;
  c.arch = Arch::Llama;
  c.L = 3; c.C = 32; c.NH = 4; c.KVH = 2; c.hidden = 48; c.T = 24; c.V = 40;
  c.rope_theta = 500000.0f; c.norm_eps = 1e-6f;
  return c;
}

void expect_same_config(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.describe(), b.describe());
  EXPECT_EQ(a.arch, b.arch);
  EXPECT_EQ(a.L, b.L);
  EXPECT_EQ(a.C, b.C);
  EXPECT_EQ(a.NH, b.NH);
  EXPECT_EQ(a.kv_heads(), b.kv_heads());
  EXPECT_EQ(a.mlp_hidden(), b.mlp_hidden());
  EXPECT_EQ(a.T, b.T);
  EXPECT_EQ(a.V, b.V);
  if (a.arch == Arch::Llama) {
    EXPECT_EQ(a.rope_theta, b.rope_theta);
    EXPECT_EQ(a.norm_eps, b.norm_eps);
  }
}

void expect_same_weights(const Model& a, const Model& b) {
  ASSERT_EQ(a.params().size(), b.params().size());
  for (size_t k = 0; k < a.params().size(); ++k) {
    ASSERT_EQ(a.params()[k].name, b.params()[k].name);
    ASSERT_EQ(a.params()[k].value.shape(), b.params()[k].value.shape());
    EXPECT_EQ(std::memcmp(a.params()[k].value.data(), b.params()[k].value.data(), a.params()[k].value.bytes()), 0)
        << a.params()[k].name;
  }
}

// Loads `path` the way the CLI does: its config, a fresh model, its weights.
std::unique_ptr<Model> load(const std::string& path) {
  const ModelConfig c = read_config(path);
  auto m = make_model(c);
  m->init(1234);
  load_weights(*m, path);
  return m;
}

std::vector<std::pair<std::string, const Tensor*>> named(const Model& m) {
  std::vector<std::pair<std::string, const Tensor*>> ts;
  for (const Param& p : m.params()) ts.emplace_back(p.name, &p.value);
  return ts;
}

int64_t total_bytes(const Model& m) {
  int64_t b = 0;
  for (const Param& p : m.params()) b += int64_t(p.value.bytes());
  return b;
}

class WeightsArch : public Weights, public ::testing::WithParamInterface<Arch> {
 protected:
  ModelConfig cfg() const { return GetParam() == Arch::GPT2 ? gpt_cfg() : llama_cfg(); }
};

TEST_P(WeightsArch, FolderRoundTripSingleFile) {
  auto a = make_model(cfg());
  a->init(7);
  save_weights(*a, p("model"));
  EXPECT_TRUE(fs::is_regular_file(p("model/config.json")));
  EXPECT_TRUE(fs::is_regular_file(p("model/model.safetensors")));
  EXPECT_FALSE(fs::exists(p("model/model.safetensors.index.json")));
  expect_same_config(read_config(p("model")), cfg());
  auto b = load(p("model"));
  expect_same_weights(*a, *b);
}

TEST_P(WeightsArch, FolderRoundTripThreeShards) {
  auto a = make_model(cfg());
  a->init(8);
  // The largest tensor fits; the whole model needs three shards.
  const size_t limit = size_t(total_bytes(*a) / 3 + total_bytes(*a) / 10);
  save_weights(*a, p("model"), limit);
  EXPECT_FALSE(fs::exists(p("model/model.safetensors")));
  ASSERT_TRUE(fs::is_regular_file(p("model/model.safetensors.index.json")));
  std::set<std::string> shards;
  for (const auto& e : fs::directory_iterator(p("model")))
    if (e.path().filename().string().rfind("model-", 0) == 0) shards.insert(e.path().filename().string());
  EXPECT_EQ(shards.size(), 3u);
  EXPECT_TRUE(shards.count("model-00001-of-00003.safetensors"));
  expect_same_config(read_config(p("model")), cfg());
  auto b = load(p("model"));
  expect_same_weights(*a, *b);

  // Saving again into the same folder as one file removes the shards and the index.
  save_weights(*a, p("model"));
  EXPECT_TRUE(fs::is_regular_file(p("model/model.safetensors")));
  EXPECT_FALSE(fs::exists(p("model/model.safetensors.index.json")));
  EXPECT_FALSE(fs::exists(p("model/model-00001-of-00003.safetensors")));
  expect_same_weights(*a, *load(p("model")));
}

TEST_P(WeightsArch, SingleFileRoundTripKeepsTheConfig) {
  auto a = make_model(cfg());
  a->init(9);
  save_weights(*a, p("w.safetensors"));
  expect_same_config(read_config(p("w.safetensors")), cfg());
  expect_same_weights(*a, *load(p("w.safetensors")));
}

TEST_P(WeightsArch, HfConfigRoundTrip) {
  for (ModelConfig c : {cfg(), GetParam() == Arch::GPT2 ? preset("gpt2") : preset("llama-tiny")}) {
    const json j = hf_config(c);
    expect_same_config(config_from_hf(j), c);
    const json back = json::parse(j.dump());
    expect_same_config(config_from_hf(back), c);
  }
}

TEST_P(WeightsArch, RefusesNaNAndInfNamingTheTensor) {
  auto a = make_model(cfg());
  a->init(3);
  Param& w = a->params()[2];
  w.value.data()[5] = std::numeric_limits<float>::quiet_NaN();
  save_weights(*a, p("nan"));
  auto b = make_model(cfg());
  std::string e = error_of([&] { load_weights(*b, p("nan")); });
  EXPECT_NE(e.find("[weights]"), std::string::npos) << e;
  EXPECT_NE(e.find(w.name), std::string::npos) << e;
  EXPECT_NE(e.find("NaN"), std::string::npos) << e;
  w.value.data()[5] = std::numeric_limits<float>::infinity();
  save_weights(*a, p("inf.safetensors"));
  e = error_of([&] { load_weights(*b, p("inf.safetensors")); });
  EXPECT_NE(e.find(w.name), std::string::npos) << e;
  EXPECT_NE(e.find("Inf"), std::string::npos) << e;
}

TEST_P(WeightsArch, ConfigThatDisagreesWithTheWeightsNamesBoth) {
  auto a = make_model(cfg());
  save_weights(*a, p("m"), size_t(total_bytes(*a) / 2));
  json j = hf_config(cfg());
  j[GetParam() == Arch::GPT2 ? "n_layer" : "num_hidden_layers"] = 5;
  write("m/config.json", j.dump());
  std::string e = error_of([&] { read_config(p("m")); });
  EXPECT_NE(e.find("config.json"), std::string::npos) << e;
  EXPECT_NE(e.find("says 5 layers"), std::string::npos) << e;
  EXPECT_NE(e.find("hold 3"), std::string::npos) << e;
  EXPECT_NE(e.find("(hint: "), std::string::npos) << e;
  // A model built from the flags instead still sees the disagreement at load time.
  auto b = make_model(cfg());
  EXPECT_EQ(error_of([&] { load_weights(*b, p("m")); }), e);

  j = hf_config(cfg());
  j["vocab_size"] = 41;
  write("m/config.json", j.dump());
  e = error_of([&] { read_config(p("m")); });
  EXPECT_NE(e.find("config.json"), std::string::npos) << e;
  EXPECT_NE(e.find("(41, "), std::string::npos) << e;
  EXPECT_NE(e.find("(40, "), std::string::npos) << e;
}

INSTANTIATE_TEST_SUITE_P(Both, WeightsArch, ::testing::Values(Arch::GPT2, Arch::Llama),
                         [](const auto& info) { return std::string(arch_name(info.param)); });

// ---- folders written exactly as Hugging Face writes them ----

TEST_F(Weights, LoadsAHuggingFaceGpt2Folder) {
  // config.json as the Hub's gpt2 has it (fields trimmed to what matters, n_inner null), the
  // weights with the causal-mask buffers.
  fs::create_directories(p("gpt2"));
  write("gpt2/config.json", R"({
  "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
  "bos_token_id": 39, "embd_pdrop": 0.1, "eos_token_id": 39, "initializer_range": 0.02,
  "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 16, "n_embd": 64, "n_head": 2,
  "n_inner": null, "n_layer": 3, "n_positions": 16, "resid_pdrop": 0.1, "scale_attn_weights": true,
  "summary_activation": null, "torch_dtype": "float32", "transformers_version": "4.40.0",
  "use_cache": true, "vocab_size": 40})");
  auto src = make_model(gpt_cfg());
  src->init(21);
  auto ts = named(*src);
  std::vector<Tensor> extra;
  extra.reserve(8);
  for (int i = 0; i < 3; ++i) {
    extra.push_back(Tensor::zeros({1, 1, 16, 16}, Category::Workspace, "mask"));
    ts.emplace_back("h." + std::to_string(i) + ".attn.bias", &extra.back());
  }
  save_safetensors(p("gpt2/model.safetensors"), ts, {{"format", "pt"}});
  const ModelConfig c = read_config(p("gpt2"));
  expect_same_config(c, gpt_cfg());
  EXPECT_EQ(c.NH, 2);  // from n_head: the C/64 guess would say 1
  expect_same_weights(*src, *load(p("gpt2")));
}

TEST_F(Weights, LoadsAShardedHuggingFaceFolderOfEitherArchitecture) {
  for (Arch arch : {Arch::GPT2, Arch::Llama}) {
    const ModelConfig cfg = arch == Arch::GPT2 ? gpt_cfg() : llama_cfg();
    const std::string d = arch == Arch::GPT2 ? "g" : "l";
    fs::create_directories(p(d));
    auto src = make_model(cfg);
    src->init(22);
    // Two shards split by hand, the index with HF's "metadata"/"weight_map"; GPT-2's names carry
    // the "transformer." prefix as GPT2LMHeadModel.save_pretrained writes them.
    std::vector<std::pair<std::string, const Tensor*>> s1, s2;
    json wm = json::object();
    const auto& ps = src->params();
    for (size_t k = 0; k < ps.size(); ++k) {
      const std::string n = (arch == Arch::GPT2 ? "transformer." : "") + ps[k].name;
      const bool first = k < ps.size() / 2;
      (first ? s1 : s2).emplace_back(n, &ps[k].value);
      wm[n] = first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
    }
    save_safetensors(p(d + "/model-00001-of-00002.safetensors"), s1, {{"format", "pt"}});
    save_safetensors(p(d + "/model-00002-of-00002.safetensors"), s2, {{"format", "pt"}});
    write(d + "/model.safetensors.index.json",
          json{{"metadata", {{"total_size", total_bytes(*src)}}}, {"weight_map", wm}}.dump(2));
    if (arch == Arch::GPT2) {
      write(d + "/config.json", R"({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": 3,
        "n_embd": 64, "n_head": 2, "n_positions": 16, "vocab_size": 40, "layer_norm_epsilon": 1e-05})");
    } else {
      write(d + "/config.json", R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2,
        "head_dim": 8, "hidden_act": "silu", "hidden_size": 32, "initializer_range": 0.02,
        "intermediate_size": 48, "max_position_embeddings": 24, "mlp_bias": false,
        "num_attention_heads": 4, "num_hidden_layers": 3, "num_key_value_heads": 2,
        "pretraining_tp": 1, "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 500000.0,
        "tie_word_embeddings": false, "torch_dtype": "float32", "vocab_size": 40})");
    }
    expect_same_config(read_config(p(d)), cfg);
    expect_same_weights(*src, *load(p(d)));
  }
}

TEST_F(Weights, Gpt2FileReadsItsHeadsFromTheConfigBesideIt) {
  // C = 64 with 2 heads: a C/64 guess would say 1.
  auto src = make_model(gpt_cfg());
  src->init(5);
  fs::create_directories(p("hf"));
  save_safetensors(p("hf/gpt2.safetensors"), named(*src), {{"format", "pt"}});  // no remat metadata
  // Without config.json the head count is not guessed (C/64 would say 1): refused, naming --heads.
  const std::string e = error_of([&] { read_config(p("hf/gpt2.safetensors")); });
  EXPECT_NE(e.find("holds a GPT-2 without config.json"), std::string::npos) << e;
  EXPECT_NE(e.find("--heads 1 here"), std::string::npos) << e;
  const std::string e3 = error_of([&] { read_config(p("hf/gpt2.safetensors"), 3); });  // 3 does not divide 64
  EXPECT_NE(e3.find("--heads 3 does not divide the width 64"), std::string::npos) << e3;
  write("hf/config.json", hf_config(gpt_cfg()).dump());
  const ModelConfig c = read_config(p("hf/gpt2.safetensors"));
  EXPECT_EQ(c.NH, 2);
  expect_same_config(c, gpt_cfg());
  expect_same_weights(*src, *load(p("hf/gpt2.safetensors")));
}

TEST_F(Weights, LlamaFileWithoutConfigNeedsTheHeads) {
  auto src = make_model(llama_cfg());
  src->init(6);
  save_safetensors(p("l.safetensors"), named(*src), {{"format", "pt"}});
  const std::string e = error_of([&] { read_config(p("l.safetensors")); });
  EXPECT_NE(e.find("config.json"), std::string::npos) << e;
  EXPECT_NE(e.find("--heads"), std::string::npos) << e;
  const ModelConfig c = read_config(p("l.safetensors"), 4);
  EXPECT_EQ(c.arch, Arch::Llama);
  EXPECT_EQ(c.NH, 4);
  EXPECT_EQ(c.kv_heads(), 2);  // from k_proj's rows
  EXPECT_EQ(c.mlp_hidden(), 48);
  EXPECT_EQ(c.L, 3);
  EXPECT_EQ(c.V, 40);
}

TEST_F(Weights, ConfigFromHfErrorsNameTheKey) {
  json j = hf_config(llama_cfg());
  auto err = [](const json& x) { return error_of([&] { config_from_hf(x); }); };
  json t = j;
  t["tie_word_embeddings"] = true;
  EXPECT_NE(err(t).find("tie_word_embeddings"), std::string::npos) << err(t);
  t = j;
  t["head_dim"] = 16;
  EXPECT_NE(err(t).find("head_dim"), std::string::npos) << err(t);
  t = j;
  t["num_hidden_layers"] = "three";
  EXPECT_NE(err(t).find("num_hidden_layers"), std::string::npos) << err(t);
  t = j;
  t.erase("hidden_size");
  EXPECT_NE(err(t).find("hidden_size"), std::string::npos) << err(t);
  t = j;
  t.erase("num_key_value_heads");
  EXPECT_EQ(config_from_hf(t).kv_heads(), 4);  // absent: as many as the query heads
  t = j;
  t.erase("rope_theta");
  EXPECT_EQ(config_from_hf(t).rope_theta, 10000.0f);
  t = j;
  t["model_type"] = "mamba";
  t["architectures"] = {"MambaForCausalLM"};
  const std::string e = err(t);
  EXPECT_NE(e.find("'mamba'"), std::string::npos) << e;
  EXPECT_NE(e.find("gpt2"), std::string::npos) << e;
  EXPECT_NE(e.find("llama"), std::string::npos) << e;
  json g = hf_config(gpt_cfg());
  g["n_head"] = 3;  // does not divide 64
  EXPECT_NE(err(g).find("[config]"), std::string::npos) << err(g);
  // The written config has Hugging Face's field names and values.
  EXPECT_EQ(j["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(j["head_dim"], 8);
  EXPECT_EQ(j["hidden_act"], "silu");
  EXPECT_EQ(j["tie_word_embeddings"], false);
  EXPECT_EQ(j["torch_dtype"], "float32");
  EXPECT_EQ(j["rms_norm_eps"].get<double>(), 1e-6);
  EXPECT_EQ(g["architectures"][0], "GPT2LMHeadModel");
  EXPECT_TRUE(g["n_inner"].is_null());
}

TEST_F(Weights, ExtraOrBadMetadataIsAnError) {
  auto src = make_model(gpt_cfg());
  save_safetensors(p("bad.safetensors"), named(*src), {{"remat.L", "3x"}, {"remat.C", "64"}});
  const std::string e = error_of([&] { read_config(p("bad.safetensors")); });
  EXPECT_NE(e.find("remat.L"), std::string::npos) << e;
  // A tensor the model does not use.
  auto ts = named(*src);
  Tensor extra = Tensor::zeros({2}, Category::Workspace, "x");
  ts.emplace_back("h.0.attn.extra", &extra);
  save_safetensors(p("extra.safetensors"), ts, {{"format", "pt"}});
  auto m = make_model(gpt_cfg());
  const std::string e2 = error_of([&] { load_weights(*m, p("extra.safetensors")); });
  EXPECT_NE(e2.find("h.0.attn.extra"), std::string::npos) << e2;
}

}  // namespace
