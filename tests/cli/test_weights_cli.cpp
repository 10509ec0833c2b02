// Weights and model folders on the command line: each bad input is one line on stderr with a hint
// and exit code 1; `remat grads` on a LLaMA folder saved by `remat train`.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "model/weights.h"
#include "run.h"

namespace {

using namespace remat_cli_test;
using nlohmann::json;

std::string check_user_error(const RunResult& r, const std::vector<std::string>& needles) {
  SCOPED_TRACE(r.describe());
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.signal, 0) << "killed by a signal";
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.find("terminate called"), std::string::npos);
  EXPECT_EQ(r.err.find("internal error"), std::string::npos);
  const auto lines = split_lines(r.err);
  EXPECT_EQ(lines.size(), 1u) << "stderr must be exactly one line";
  const std::string line = lines.empty() ? "" : lines[0];
  EXPECT_EQ(line.rfind("remat: [", 0), 0u) << line;
  EXPECT_NE(line.find("(hint: "), std::string::npos) << line;
  for (const auto& n : needles) EXPECT_NE(line.find(n), std::string::npos) << "missing '" << n << "' in: " << line;
  return line;
}
#define EXPECT_USER_ERROR(r, ...)            \
  do {                                       \
    SCOPED_TRACE("expected a user error");   \
    check_user_error((r), {__VA_ARGS__});    \
  } while (0)

remat::ModelConfig tiny_llama() {
  remat::ModelConfig c = remat::preset("llama-tiny");
  c.L = 2;
  return c;
}

// A LLaMA model folder written in-process; max_shard_bytes > 0 shards it.
std::string write_folder(const TempDir& d, const std::string& name, size_t max_shard_bytes = remat::kDefaultShardBytes,
                         float nan_at_first = 0) {
  auto m = remat::make_model(tiny_llama());
  m->init(3);
  if (nan_at_first != 0) m->params()[1].value.data()[0] = std::numeric_limits<float>::quiet_NaN();
  remat::save_weights(*m, d / name, max_shard_bytes);
  return d / name;
}

// `remat train` from a model: one step, small batch.
RunResult train_from(const std::string& model, std::vector<std::string> extra = {}) {
  std::vector<std::string> a{"train", "--init-from", model, "--steps", "1", "--batch", "2", "--seq", "16",
                             "--eval-every", "0", "--sample-tokens", "0", "--no-progress"};
  a.insert(a.end(), extra.begin(), extra.end());
  return run_remat(a);
}

// An llm.c token file: 256 int32 header (magic, version, count), then the tokens (v1 uint16, v2 uint32).
std::string llmc_file(const TempDir& d, const std::string& name, const std::vector<uint32_t>& tokens, int version) {
  std::string bytes(256 * 4, '\0');
  const int32_t head[3] = {20240520, version, int32_t(tokens.size())};
  std::memcpy(bytes.data(), head, sizeof head);
  for (uint32_t t : tokens) {
    if (version == 1) {
      const uint16_t v = uint16_t(t);
      bytes.append(reinterpret_cast<const char*>(&v), 2);
    } else {
      bytes.append(reinterpret_cast<const char*>(&t), 4);
    }
  }
  return d.write(name, bytes);
}

std::vector<uint32_t> random_tokens(size_t n, uint32_t V, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<uint32_t> t(n);
  for (auto& x : t) x = g() % V;
  return t;
}

TEST(CliWeights, ConfigThatDisagreesWithTheWeights) {
  TempDir d;
  const std::string m = write_folder(d, "m", 60000);  // sharded
  json j = json::parse(slurp(m + "/config.json"));
  j["num_hidden_layers"] = 4;
  d.write("m/config.json", j.dump(2));
  EXPECT_USER_ERROR(train_from(m), "[weights]", "config.json", "says 4 layers", "hold 2");
}

// A BF16 model folder (as Hugging Face ships them) trains from --init-from; one whose MLP is wider
// than --hidden asks for is refused in one line naming the tensor, both shapes and the flags.
TEST(CliWeights, Bf16Folder) {
  TempDir d;
  auto m = remat::make_model(tiny_llama());
  m->init(3);
  remat::save_weights(*m, d / "bf", 30000, remat::DType::BF16);  // sharded
  ASSERT_TRUE(fs::is_regular_file(d / "bf/model.safetensors.index.json"));
  for (const auto& e : fs::directory_iterator(d / "bf")) {
    if (e.path().extension() != ".safetensors") continue;
    const remat::SafetensorsReader r(e.path().string());
    for (const auto& t : r.entries()) EXPECT_EQ(t.dtype, "BF16") << t.name;
  }
  const auto ok = train_from(d / "bf");
  EXPECT_EQ(ok.exit_code, 0) << ok.describe();
  const int64_t H = tiny_llama().mlp_hidden();
  const std::string rows = std::to_string(H) + ", " + std::to_string(tiny_llama().C) + ")";
  EXPECT_USER_ERROR(train_from(d / "bf", {"--hidden", std::to_string(H + 8)}), "[weights]",
                    "BF16 tensor 'model.layers.0.mlp.gate_proj.weight'", "has shape (" + rows,
                    "expects (" + std::to_string(H + 8) + ", ", "--hidden");
}

TEST(CliWeights, MissingShard) {
  TempDir d;
  const std::string m = write_folder(d, "m", 60000);
  std::string second;
  for (const auto& e : fs::directory_iterator(m))
    if (e.path().filename().string().rfind("model-00002-of-", 0) == 0) second = e.path().filename().string();
  ASSERT_FALSE(second.empty());
  ASSERT_TRUE(fs::remove(m + "/" + second));
  EXPECT_USER_ERROR(train_from(m), second, "not in", "missing shard");
}

TEST(CliWeights, IndexNamesAFileThatIsNotThere) {
  TempDir d;
  const std::string m = write_folder(d, "m", 60000);
  json j = json::parse(slurp(m + "/model.safetensors.index.json"));
  j["weight_map"]["model.norm.weight"] = "model-00009-of-00009.safetensors";
  d.write("m/model.safetensors.index.json", j.dump(2));
  EXPECT_USER_ERROR(train_from(m), "model-00009-of-00009.safetensors");
}

TEST(CliWeights, UnknownArchitectureInConfig) {
  TempDir d;
  const std::string m = write_folder(d, "m");
  json j = json::parse(slurp(m + "/config.json"));
  j["model_type"] = "mamba";
  j["architectures"] = {"MambaForCausalLM"};
  d.write("m/config.json", j.dump(2));
  EXPECT_USER_ERROR(train_from(m), "[config]", "'mamba'", "gpt2", "llama");
}

TEST(CliWeights, UnknownArchitectureFlag) {
  EXPECT_USER_ERROR(run_remat(tiny_train({"--steps", "1", "--arch", "mamba"})), "[config]", "'mamba'", "gpt2",
                    "llama");
}

TEST(CliWeights, KvHeadsThatDoNotDivideHeads) {
  EXPECT_USER_ERROR(run_remat(tiny_train({"--steps", "1", "--arch", "llama", "--heads", "4", "--kv-heads", "3"})),
                    "[config]", "--kv-heads 3", "--heads 4");
}

TEST(CliWeights, NaNInAWeight) {
  TempDir d;
  const std::string m = write_folder(d, "m", remat::kDefaultShardBytes, 1);
  EXPECT_USER_ERROR(train_from(m), "[weights]", "model.layers.0.input_layernorm.weight", "NaN");
}

TEST(CliWeights, TokensAtOrAboveTheVocabularyInAnLlmcV2File) {
  TempDir d;
  auto toks = random_tokens(4000, 256, 1);
  toks[1234] = 256;
  const std::string f = llmc_file(d, "f.bin", toks, 2);
  EXPECT_USER_ERROR(run_remat(tiny_train({"--steps", "1", "--arch", "llama", "--vocab", "256", "--data", f})),
                    "[data]", "256");
  toks[1234] = 70000;  // above uint16: only a v2 file holds it
  const std::string g = llmc_file(d, "g.bin", toks, 2);
  EXPECT_USER_ERROR(run_remat(tiny_train({"--steps", "1", "--arch", "llama", "--vocab", "256", "--data", g})),
                    "[data]", "70000");
}

TEST(CliWeights, GradsOnAFolderSavedByTrain) {
  TempDir d;
  const auto tr = run_remat({"train", "--preset", "llama-tiny", "--steps", "1", "--batch", "2", "--seq", "32",
                             "--block-size", "64", "--eval-every", "0", "--sample-tokens", "0", "--no-progress",
                             "--save", d / "llama"});
  ASSERT_EQ(tr.exit_code, 0) << tr.describe();
  ASSERT_TRUE(fs::is_regular_file(d / "llama/config.json"));
  const json cfg = json::parse(slurp(d / "llama/config.json"));
  EXPECT_EQ(cfg["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(cfg["max_position_embeddings"], 64);

  const std::string toks = llmc_file(d, "t.bin", random_tokens(2 * 16 + 1, 256, 2), 1);
  const auto r = run_remat({"grads", "--init-from", d / "llama", "--data", toks, "--batch", "2", "--seq", "16",
                            "--out", d / "g.safetensors"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const auto lines = split_lines(r.out);
  ASSERT_EQ(lines.size(), 1u) << r.out;
  const json j = json::parse(lines[0]);
  ASSERT_TRUE(j.contains("loss") && j["loss"].is_number());
  EXPECT_TRUE(std::isfinite(j["loss"].get<double>()));
  EXPECT_GT(j["loss"].get<double>(), 0.0);
  EXPECT_LT(j["loss"].get<double>(), 10.0);
  EXPECT_EQ(j["tokens"], 32);

  remat::SafetensorsReader w(d / "llama/model.safetensors"), g(d / "g.safetensors");
  std::set<std::string> wn, gn;
  for (const auto& e : w.entries()) wn.insert(e.name);
  for (const auto& e : g.entries()) {
    gn.insert(e.name);
    EXPECT_EQ(e.dtype, "F32");
    ASSERT_NE(w.find(e.name), nullptr) << e.name;
    EXPECT_EQ(e.shape, w.find(e.name)->shape) << e.name;
  }
  EXPECT_EQ(gn, wn);
  EXPECT_EQ(gn.size(), 2u * 9 + 3);
  // Every gradient is finite and the head's is nonzero.
  std::vector<float> head(size_t(g.at("lm_head.weight").numel()));
  g.read_f32(g.at("lm_head.weight"), head);
  double s = 0;
  for (float v : head) s += std::fabs(v);
  EXPECT_GT(s, 0);

  // Same input, same output.
  const auto r2 = run_remat({"grads", "--init-from", d / "llama", "--data", toks, "--batch", "2", "--seq", "16",
                             "--out", d / "g2.safetensors"});
  EXPECT_EQ(r2.out, r.out);
  EXPECT_EQ(slurp(d / "g2.safetensors"), slurp(d / "g.safetensors"));

  // Errors: sequence above the positions, tokens above the vocabulary, too little data, no --out.
  EXPECT_USER_ERROR(run_remat({"grads", "--init-from", d / "llama", "--data", toks, "--batch", "1", "--seq", "65",
                               "--out", d / "x.safetensors"}),
                    "--seq 65", "64");
  auto big = random_tokens(100, 256, 3);
  big[5] = 300;
  EXPECT_USER_ERROR(run_remat({"grads", "--init-from", d / "llama", "--data", llmc_file(d, "b.bin", big, 2), "--batch",
                               "1", "--seq", "16", "--out", d / "x.safetensors"}),
                    "[data]", "300");
  EXPECT_USER_ERROR(run_remat({"grads", "--init-from", d / "llama", "--data", toks, "--batch", "3", "--seq", "16",
                               "--out", d / "x.safetensors"}),
                    "[data]", "B*T+1");
  EXPECT_USER_ERROR(run_remat({"grads", "--init-from", d / "llama", "--data", toks}), "--out");
  EXPECT_FALSE(fs::exists(d / "x.safetensors"));

  // Saving into an existing model folder works, twice; into the folder the weights come from, it is refused.
  fs::create_directories(d / "tuned");
  for (int i = 0; i < 2; ++i) {
    const auto again = run_remat({"train", "--init-from", d / "llama", "--steps", "1", "--batch", "2", "--seq", "16",
                                  "--eval-every", "0", "--sample-tokens", "0", "--no-progress", "--save", d / "tuned"});
    EXPECT_EQ(again.exit_code, 0) << again.describe();
  }
  EXPECT_USER_ERROR(run_remat({"train", "--init-from", d / "llama", "--steps", "1", "--batch", "2", "--seq", "16",
                               "--save", d / "llama"}),
                    "[io]", "--save", "--init-from");
}

}  // namespace
