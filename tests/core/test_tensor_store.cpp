#include "core/tensor_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <set>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "test_util.h"

namespace fs = std::filesystem;
using remat::Category;
using remat::Tensor;
using remat::TensorStore;
using remat::testing_util::bytes_of;
using remat::testing_util::error_of;

namespace {

Tensor make(remat::Shape shape, float base) {
  Tensor t = Tensor::empty(std::move(shape), Category::Parameter, "t");
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = base + 0.5f * float(i);
  return t;
}

// 'path' (appends: GCC 12 warns -Wrestrict on "'" + std::string&&, a known false positive).
std::string sq(const std::string& s) {
  std::string out = "'";
  out += s;
  out += '\'';
  return out;
}

std::vector<float> values(const Tensor& t) { return {t.data(), t.data() + t.numel()}; }

std::vector<float> read(const TensorStore& s, const std::string& name) {
  std::vector<float> out(size_t(s.at(name).numel()), -1.0f);
  s.read_f32(name, out);
  return out;
}

std::set<std::string> files_in(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

// A GPT-2-like config.json as transformers writes it (indent 2, sorted keys).
const char* kConfigJson = R"({
  "architectures": [
    "GPT2LMHeadModel"
  ],
  "model_type": "gpt2",
  "n_embd": 4,
  "n_head": 2,
  "n_layer": 2,
  "n_positions": 8,
  "torch_dtype": "float32",
  "vocab_size": 11
}
)";

class TensorStoreTest : public remat::testing_util::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    wte = make({11, 4}, -3.0f);
    wpe = make({8, 4}, 1.0f);
    ln = make({4}, 0.25f);
    attn = make({4, 12}, -1.0f);
    proj = make({4, 4}, 2.0f);
  }
  std::string folder(const std::string& name) const {
    fs::create_directories(dir_ / name);
    return p(name);
  }
  void write(const std::string& path, const std::string& text) const { remat::write_file_atomic(path, text); }

  // A 3-shard folder in Hugging Face's layout, written by hand.
  std::string sharded3(const std::string& name) {
    const std::string d = folder(name);
    write(d + "/config.json", kConfigJson);
    const std::map<std::string, std::string> meta = {{"format", "pt"}};
    remat::save_safetensors(d + "/model-00001-of-00003.safetensors", {{"wte.weight", &wte}, {"wpe.weight", &wpe}}, meta);
    remat::save_safetensors(d + "/model-00002-of-00003.safetensors", {{"h.0.ln_1.weight", &ln}, {"h.0.attn.c_attn.weight", &attn}},
                            meta);
    remat::save_safetensors(d + "/model-00003-of-00003.safetensors", {{"h.1.mlp.c_proj.weight", &proj}}, meta);
    write(d + "/model.safetensors.index.json", R"({
  "metadata": {
    "total_size": 656
  },
  "weight_map": {
    "h.0.attn.c_attn.weight": "model-00002-of-00003.safetensors",
    "h.0.ln_1.weight": "model-00002-of-00003.safetensors",
    "h.1.mlp.c_proj.weight": "model-00003-of-00003.safetensors",
    "wpe.weight": "model-00001-of-00003.safetensors",
    "wte.weight": "model-00001-of-00003.safetensors"
  }
}
)");
    return d;
  }

  Tensor wte, wpe, ln, attn, proj;
};

}  // namespace

TEST_F(TensorStoreTest, SingleFile) {
  remat::save_safetensors(p("gpt2.safetensors"), {{"wte.weight", &wte}, {"h.0.ln_1.weight", &ln}}, {{"format", "pt"}});
  TensorStore s(p("gpt2.safetensors"));
  EXPECT_FALSE(s.is_folder());
  EXPECT_FALSE(s.has_config());
  EXPECT_EQ(s.path(), p("gpt2.safetensors"));
  EXPECT_EQ(s.names(), (std::vector<std::string>{"h.0.ln_1.weight", "wte.weight"}));
  EXPECT_EQ(read(s, "wte.weight"), values(wte));
  EXPECT_EQ(s.at("h.0.ln_1.weight").shape, (remat::Shape{4}));
  EXPECT_EQ(s.find("nope"), nullptr);
  EXPECT_EQ(s.metadata().at("format"), "pt");
  std::string msg = error_of([&] { s.config(); });
  EXPECT_NE(msg.find(sq(p("gpt2.safetensors")) + " has no config.json"), std::string::npos) << msg;
  msg = error_of([&] { s.at("lm_head.weight"); });
  EXPECT_NE(msg.find(sq(p("gpt2.safetensors")) + " has no tensor named 'lm_head.weight'"), std::string::npos) << msg;
  std::vector<float> small(3);
  msg = error_of([&] { s.read_f32("h.0.ln_1.weight", small); });
  EXPECT_NE(msg.find("holds 3 elements"), std::string::npos) << msg;
}

TEST_F(TensorStoreTest, HuggingFaceSingleFileFolder) {
  const std::string d = folder("gpt2");
  write(d + "/config.json", kConfigJson);
  remat::save_safetensors(d + "/model.safetensors", {{"wte.weight", &wte}, {"wpe.weight", &wpe}}, {{"format", "pt"}});
  write(d + "/README.md", "# gpt2\n");
  write(d + "/tokenizer.json", "{}");
  TensorStore s(d);
  EXPECT_TRUE(s.is_folder());
  ASSERT_TRUE(s.has_config());
  EXPECT_EQ(s.config()["n_layer"], 2);
  EXPECT_EQ(s.config()["architectures"][0], "GPT2LMHeadModel");
  EXPECT_EQ(s.names(), (std::vector<std::string>{"wpe.weight", "wte.weight"}));
  EXPECT_EQ(read(s, "wpe.weight"), values(wpe));
  EXPECT_EQ(s.file_of("wte.weight"), d + "/model.safetensors");
  EXPECT_EQ(s.metadata().at("format"), "pt");

  // No config.json: still a model folder, without a config.
  const std::string bare = folder("bare");
  remat::save_safetensors(bare + "/model.safetensors", {{"x", &ln}});
  TensorStore b(bare);
  EXPECT_FALSE(b.has_config());
  EXPECT_NE(error_of([&] { b.config(); }).find("has no config.json"), std::string::npos);
}

TEST_F(TensorStoreTest, HuggingFaceShardedFolder) {
  const std::string d = sharded3("sharded");
  // A stray shard of another save that the index does not name is ignored, as transformers does.
  remat::save_safetensors(d + "/model-00001-of-00002.safetensors", {{"wte.weight", &proj}});
  TensorStore s(d);
  EXPECT_TRUE(s.is_folder());
  EXPECT_EQ(s.config()["vocab_size"], 11);
  EXPECT_EQ(s.names(), (std::vector<std::string>{"h.0.attn.c_attn.weight", "h.0.ln_1.weight", "h.1.mlp.c_proj.weight",
                                                 "wpe.weight", "wte.weight"}));
  EXPECT_EQ(read(s, "wte.weight"), values(wte));
  EXPECT_EQ(read(s, "wpe.weight"), values(wpe));
  EXPECT_EQ(read(s, "h.0.ln_1.weight"), values(ln));
  EXPECT_EQ(read(s, "h.0.attn.c_attn.weight"), values(attn));
  EXPECT_EQ(read(s, "h.1.mlp.c_proj.weight"), values(proj));
  EXPECT_EQ(s.file_of("h.0.ln_1.weight"), d + "/model-00002-of-00003.safetensors");
  EXPECT_EQ(s.at("h.0.attn.c_attn.weight").shape, (remat::Shape{4, 12}));
  EXPECT_EQ(s.metadata().at("format"), "pt");
}

TEST_F(TensorStoreTest, ShardsOfMixedDtypes) {
  // Two shards as a bf16/f16 checkpoint would have them, hand-rolled.
  const std::string d = folder("half");
  auto raw = [&](const std::string& file, const std::string& header, const std::string& data) {
    std::string b(8, '\0');
    const uint64_t n = header.size();
    std::memcpy(b.data(), &n, 8);
    write(d + "/" + file, b + header + data);
  };
  const std::vector<uint16_t> bf = {0x3F80, 0x4049, 0xC000}, hf = {0x3C00, 0x3800};
  raw("model-00001-of-00002.safetensors",
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[3],"data_offsets":[0,6]}})", bytes_of(bf));
  raw("model-00002-of-00002.safetensors", R"({"b":{"dtype":"F16","shape":[1,2],"data_offsets":[0,4]}})", bytes_of(hf));
  write(d + "/model.safetensors.index.json",
        R"({"metadata":{"total_size":10},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}})");
  TensorStore s(d);
  EXPECT_FALSE(s.has_config());
  EXPECT_EQ(read(s, "a"), (std::vector<float>{1.0f, 3.140625f, -2.0f}));
  EXPECT_EQ(read(s, "b"), (std::vector<float>{1.0f, 0.5f}));
}

TEST_F(TensorStoreTest, SaveSingleFolder) {
  const std::string d = p("out");  // created by the save
  nlohmann::json config = nlohmann::json::parse(kConfigJson);
  remat::save_tensor_folder(d, {{"wte.weight", &wte}, {"wpe.weight", &wpe}, {"h.0.ln_1.weight", &ln}}, config, 0,
                            {{"format", "pt"}});
  EXPECT_EQ(files_in(d), (std::set<std::string>{"config.json", "model.safetensors"}));
  EXPECT_EQ(remat::read_file(d + "/config.json"), kConfigJson);  // byte-identical to transformers' output
  TensorStore s(d);
  EXPECT_EQ(s.config(), config);
  EXPECT_EQ(s.names().size(), 3u);
  EXPECT_EQ(read(s, "wte.weight"), values(wte));
  EXPECT_EQ(read(s, "h.0.ln_1.weight"), values(ln));
  EXPECT_EQ(s.metadata().at("format"), "pt");
  // The data order is the given order.
  remat::SafetensorsReader r(d + "/model.safetensors");
  EXPECT_EQ(r.entries()[0].name, "wte.weight");
  EXPECT_EQ(r.entries()[2].name, "h.0.ln_1.weight");
  // A limit the total fits under still gives one file.
  remat::save_tensor_folder(d, {{"wte.weight", &wte}}, config, wte.bytes());
  EXPECT_EQ(files_in(d), (std::set<std::string>{"config.json", "model.safetensors"}));
}

TEST_F(TensorStoreTest, SaveShardedFolder) {
  const std::string d = p("sharded");
  const nlohmann::json config = {{"model_type", "gpt2"}, {"n_layer", 2}};
  // 176 + 128 + 16 + 192 + 64 bytes with a 300-byte limit: [wte], [wpe, ln], [attn, proj].
  const std::vector<std::pair<std::string, const Tensor*>> list = {
      {"wte.weight", &wte}, {"wpe.weight", &wpe}, {"h.0.ln_1.weight", &ln}, {"h.0.attn.c_attn.weight", &attn}, {"h.1.proj", &proj}};
  remat::save_tensor_folder(d, list, config, 300, {{"format", "pt"}});
  EXPECT_EQ(files_in(d), (std::set<std::string>{"config.json", "model-00001-of-00003.safetensors",
                                                "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors",
                                                "model.safetensors.index.json"}));
  const nlohmann::json index = nlohmann::json::parse(remat::read_file(d + "/model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"], 176 + 128 + 16 + 192 + 64);
  EXPECT_EQ(index["weight_map"].size(), 5u);
  EXPECT_EQ(index["weight_map"]["wte.weight"], "model-00001-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["wpe.weight"], "model-00002-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["h.0.ln_1.weight"], "model-00002-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["h.0.attn.c_attn.weight"], "model-00003-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["h.1.proj"], "model-00003-of-00003.safetensors");
  TensorStore s(d);
  EXPECT_EQ(s.config(), config);
  for (const auto& [name, t] : list) EXPECT_EQ(read(s, name), values(*t)) << name;
  EXPECT_EQ(s.metadata().at("format"), "pt");
  remat::SafetensorsReader shard3(d + "/model-00003-of-00003.safetensors");
  EXPECT_EQ(shard3.metadata().at("format"), "pt");

  // A tensor larger than the limit gets a shard of its own.
  const std::string d2 = p("big");
  remat::save_tensor_folder(d2, {{"ln", &ln}, {"wte", &wte}, {"ln2", &ln}}, config, 100);
  TensorStore s2(d2);
  EXPECT_EQ(s2.file_of("ln"), d2 + "/model-00001-of-00003.safetensors");
  EXPECT_EQ(s2.file_of("wte"), d2 + "/model-00002-of-00003.safetensors");
  EXPECT_EQ(s2.file_of("ln2"), d2 + "/model-00003-of-00003.safetensors");
}

TEST_F(TensorStoreTest, ResaveRemovesStaleShardsOnly) {
  const std::string d = folder("m");
  const nlohmann::json config = {{"n_layer", 2}};
  const std::vector<std::pair<std::string, const Tensor*>> list = {
      {"wte.weight", &wte}, {"wpe.weight", &wpe}, {"h.0.ln_1.weight", &ln}, {"h.0.attn.c_attn.weight", &attn}, {"h.1.proj", &proj}};
  // Files that are not ours stay.
  const std::set<std::string> others = {"README.md", "tokenizer.json", "pytorch_model.bin", "other.safetensors",
                                        "model-notes.txt", "model-x-of-y.safetensors.bak"};
  for (const auto& f : others) write(d + "/" + f, "x");
  auto with_others = [&](std::set<std::string> s) {
    s.insert(others.begin(), others.end());
    return s;
  };

  remat::save_tensor_folder(d, list, config, 300);  // 3 shards
  EXPECT_EQ(files_in(d), with_others({"config.json", "model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                      "model-00003-of-00003.safetensors", "model.safetensors.index.json"}));
  remat::save_tensor_folder(d, list, config, 400);  // 2 shards: the 3 old ones go
  EXPECT_EQ(files_in(d), with_others({"config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                                      "model.safetensors.index.json"}));
  EXPECT_EQ(read(TensorStore(d), "h.1.proj"), values(proj));
  remat::save_tensor_folder(d, list, config);  // one file: the shards and the index go
  EXPECT_EQ(files_in(d), with_others({"config.json", "model.safetensors"}));
  EXPECT_EQ(read(TensorStore(d), "wpe.weight"), values(wpe));
  remat::save_tensor_folder(d, list, config, 300);  // sharded again: model.safetensors goes
  EXPECT_EQ(files_in(d), with_others({"config.json", "model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                      "model-00003-of-00003.safetensors", "model.safetensors.index.json"}));
  TensorStore s(d);
  EXPECT_EQ(s.file_of("wte.weight"), d + "/model-00001-of-00003.safetensors");
  EXPECT_EQ(read(s, "h.0.attn.c_attn.weight"), values(attn));
}

TEST_F(TensorStoreTest, FolderErrors) {
  struct Case {
    std::string name, want;
    std::function<void(const std::string&)> setup;
  };
  const std::string idx = "/model.safetensors.index.json";
  std::vector<Case> cases = {
      {"neither", "has neither model.safetensors nor model.safetensors.index.json",
       [&](const std::string& d) { write(d + "/config.json", kConfigJson); }},
      {"missing_shard", "the index names 'model-00002-of-00003.safetensors', which is not in '",
       [&](const std::string& d) {
         sharded3(fs::path(d).filename().string());
         fs::remove(d + "/model-00002-of-00003.safetensors");
       }},
      {"not_in_shard", "maps tensor 'h.1.mlp.c_proj.weight' to 'model-00003-of-00003.safetensors', which does not hold it",
       [&](const std::string& d) {
         sharded3(fs::path(d).filename().string());
         remat::save_safetensors(d + "/model-00003-of-00003.safetensors", {});
       }},
      {"two_shards", "tensor 'wpe.weight' is in two shards of '",
       [&](const std::string& d) {
         sharded3(fs::path(d).filename().string());
         remat::save_safetensors(d + "/model-00003-of-00003.safetensors", {{"h.1.mlp.c_proj.weight", &proj}, {"wpe.weight", &wpe}});
       }},
      {"unlisted", "holds tensor 'extra', which the index '",
       [&](const std::string& d) {
         sharded3(fs::path(d).filename().string());
         remat::save_safetensors(d + "/model-00003-of-00003.safetensors", {{"h.1.mlp.c_proj.weight", &proj}, {"extra", &ln}});
       }},
      {"wrong_shard", "maps tensor 'wpe.weight' to 'model-00002-of-00003.safetensors', but it is in '",
       [&](const std::string& d) {
         sharded3(fs::path(d).filename().string());
         std::string text = remat::read_file(d + idx);
         text.replace(text.find("\"wpe.weight\": \"model-00001"), 26, "\"wpe.weight\": \"model-00002");
         write(d + idx, text);
       }},
      {"index_syntax", "is not valid JSON at byte",
       [&](const std::string& d) {
         sharded3(fs::path(d).filename().string());
         std::string text = remat::read_file(d + idx);
         write(d + idx, text.substr(0, text.size() / 2));
       }},
      {"index_dup", "repeats the key 'wte.weight'",
       [&](const std::string& d) {
         sharded3(fs::path(d).filename().string());
         std::string text = remat::read_file(d + idx);
         text.replace(text.find("\"wte.weight\""), 0, "\"wte.weight\": \"model-00002-of-00003.safetensors\",\n    ");
         write(d + idx, text);
       }},
      {"index_no_map", "has no \"weight_map\" object",
       [&](const std::string& d) { write(d + idx, R"({"metadata": {}, "weightmap": {}})"); }},
      {"index_not_object", "is not a JSON object", [&](const std::string& d) { write(d + idx, "[]"); }},
      {"index_number", "maps tensor 'a' to a non-string",
       [&](const std::string& d) { write(d + idx, R"({"weight_map": {"a": 1}})"); }},
      {"index_escape", "maps tensor 'a' to '../x.safetensors', which is not a file name",
       [&](const std::string& d) { write(d + idx, R"({"weight_map": {"a": "../x.safetensors"}})"); }},
      {"config_syntax", "config.json' is not valid JSON at byte",
       [&](const std::string& d) {
         write(d + "/config.json", "{\"n_layer\": 2,\n}");
         remat::save_safetensors(d + "/model.safetensors", {{"a", &ln}});
       }},
      {"config_array", "config.json' is not a JSON object",
       [&](const std::string& d) {
         write(d + "/config.json", "[1]");
         remat::save_safetensors(d + "/model.safetensors", {{"a", &ln}});
       }},
      {"corrupt_shard", "model-00002-of-00003.safetensors': truncated header",
       [&](const std::string& d) {
         sharded3(fs::path(d).filename().string());
         write(d + "/model-00002-of-00003.safetensors", remat::read_file(d + "/model-00002-of-00003.safetensors").substr(0, 20));
       }},
  };
  for (const Case& c : cases) {
    const std::string d = folder(c.name);
    c.setup(d);
    std::string msg = error_of([&] { TensorStore s(d); });
    EXPECT_NE(msg.find(c.want), std::string::npos) << c.name << ": " << msg;
    EXPECT_NE(msg.find(d), std::string::npos) << c.name << ": " << msg;
    EXPECT_NE(msg.find("(hint: "), std::string::npos) << c.name << ": " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << c.name << ": " << msg;
    EXPECT_EQ(msg.find("json.exception"), std::string::npos) << c.name << ": " << msg;
  }
  std::string msg = error_of([&] { TensorStore s(p("nowhere")); });
  EXPECT_NE(msg.find(sq(p("nowhere")) + ": no such file or folder"), std::string::npos) << msg;
}

TEST_F(TensorStoreTest, SaveErrors) {
  const nlohmann::json config = {{"n_layer", 1}};
  Tensor undefined;
  std::string msg = error_of([&] { remat::save_tensor_folder(p("no/parent/m"), {{"a", &ln}}, config); });
  EXPECT_NE(msg.find("cannot create the folder '" + p("no/parent/m") + "'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("parent folder must exist"), std::string::npos) << msg;
  write(p("file"), "x");
  msg = error_of([&] { remat::save_tensor_folder(p("file"), {{"a", &ln}}, config); });
  EXPECT_NE(msg.find("it exists and is not a folder"), std::string::npos) << msg;
  msg = error_of([&] { remat::save_tensor_folder(p("m"), {{"a", &ln}, {"a", &wpe}}, config, 16); });
  EXPECT_NE(msg.find("'a' appears twice"), std::string::npos) << msg;
  msg = error_of([&] { remat::save_tensor_folder(p("m"), {{"u", &undefined}}, config); });
  EXPECT_NE(msg.find("'u' is undefined"), std::string::npos) << msg;
  msg = error_of([&] { remat::save_tensor_folder(p("m"), {{"a", &ln}}, nlohmann::json::array()); });
  EXPECT_NE(msg.find("the config is not a JSON object"), std::string::npos) << msg;
  EXPECT_EQ(files_in(dir_), (std::set<std::string>{"file"}));  // nothing written by a refused save
}
