// Messages that name what the user did: a flag stranded after '--', another program's spelling of a
// flag, sample flags that contradict the model or are out of range, config.json values in the file's
// own names, and --arch against the weights of --init-from.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "run.h"

namespace {

using namespace remat_cli_test;
using json = nlohmann::json;

const std::vector<std::string> kTinyModel = {"--layers", "2",      "--channels", "64",        "--heads", "4",
                                             "--batch",  "2",      "--seq",      "16",        "--steps", "1",
                                             "--eval-every", "0", "--sample-tokens", "0", "--no-progress"};

// A trained tiny model saved at `path` (a .safetensors file, or a folder with config.json).
void save_model(const std::string& preset, const std::string& path) {
  std::vector<std::string> a{"train", "--preset", preset, "--save", path};
  a.insert(a.end(), kTinyModel.begin(), kTinyModel.end());
  const RunResult r = run_remat(a);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
}

TEST(CliMessages, FlagAfterDoubleDashIsNotCalledAnotherCommandsFlag) {
  // Was "--steps is a flag of 'remat bench'".
  const std::string line = check_user_error(run_remat({"train", "--", "--steps", "5"}), 2, {"'--steps' after '--'", "drop the '--'"});
  EXPECT_EQ(line.find("bench"), std::string::npos) << line;
}

TEST(CliMessages, OtherProgramsSpellingsSuggestRemats) {
  check_user_error(run_remat({"train", "--learning-rate", "0.1"}), 2, {"--learning-rate", "did you mean --lr?"});
  check_user_error(run_remat({"train", "--n_layer", "3"}), 2, {"did you mean --layers?"});
  check_user_error(run_remat({"plan", "--batch-size", "3"}), 2, {"did you mean --batch?"});
}

TEST(CliMessages, SampleFlagsAreChecked) {
  TempDir d;
  save_model("tiny", d / "m.safetensors");
  // --heads was ignored for a file that records its heads; --top-k -3 named a vocabulary of 2^63-1;
  // a huge --tokens failed in vector::reserve.
  check_user_error(run_remat({"sample", "--init-from", d / "m.safetensors", "--heads", "3"}), 1,
                   {"--heads 3 contradicts", "4 heads", "drop --heads"});
  const std::string k = check_user_error(run_remat({"sample", "--init-from", d / "m.safetensors", "--top-k", "-3"}), 1,
                                         {"--top-k must be between 0", "got -3"});
  EXPECT_EQ(k.find("9223372036854775807"), std::string::npos) << k;
  check_user_error(run_remat({"sample", "--init-from", d / "m.safetensors", "--tokens", "9223372036854775807"}), 1,
                   {"--tokens 9223372036854775807 is above"});
  EXPECT_EQ(run_remat({"sample", "--init-from", d / "m.safetensors", "--heads", "4", "--tokens", "2"}).exit_code, 0);
}

TEST(CliMessages, ConfigJsonErrorsNameTheFileAndItsFields) {
  TempDir d;
  save_model("tiny", d / "gpt2");
  const json good = json::parse(slurp(d / "gpt2/config.json"));
  // model_type llama over GPT-2's fields: was "has no num_hidden_layers".
  json j = good;
  j["model_type"] = "llama";
  d.write("gpt2/config.json", j.dump());
  check_user_error(run_remat({"sample", "--init-from", d / "gpt2", "--tokens", "1"}), 1,
                   {"config.json", "model_type 'llama'", "GPT-2's fields", "model_type gpt2"});
  // An inconsistent model in the file's names, not as flags.
  j = good;
  j["n_head"] = 3;
  d.write("gpt2/config.json", j.dump());
  const std::string line = check_user_error(run_remat({"sample", "--init-from", d / "gpt2", "--tokens", "1"}), 1,
                                            {"[config]", "config.json", "n_embd 64 is not divisible by n_head 3"});
  EXPECT_EQ(line.find("--heads"), std::string::npos) << line;
}

TEST(CliMessages, ArchAgainstTheWeightsOfInitFrom) {
  TempDir d;
  save_model("llama-tiny", d / "llama");
  // Was a complaint about --kv-heads.
  std::vector<std::string> a{"train", "--init-from", d / "llama", "--arch", "gpt2", "--steps", "1", "--seq", "16"};
  const std::string line = check_user_error(run_remat(a), 1, {"--arch gpt2 contradicts --init-from", "llama model", "drop --arch"});
  EXPECT_EQ(line.find("--kv-heads"), std::string::npos) << line;
}

}  // namespace
