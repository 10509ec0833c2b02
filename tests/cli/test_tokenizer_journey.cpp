// A user's journey with a model that comes with its tokenizer: a Hugging Face GPT-2-shaped folder
// (config.json, weights, tokenizer.json; tiny weights and a hand-made vocabulary made here) ->
// remat tokenize -> remat train --init-from -> remat sample --prompt prints text. And text data
// through the folder's tokenizer directly, and the refusals.
#include <fstream>

#include <nlohmann/json.hpp>

#include "run.h"
#include "tokenizer/tiny_bpe.h"

using namespace remat_cli_test;
using nlohmann::json;

namespace {
// The model folder: a 320-token tiny GPT-2 (the vocabulary's ids go to 300) with tokenizer.json.
std::string make_folder(const TempDir& dir) {
  const std::string folder = dir / "gpt2-tiny";
  const RunResult r = run_remat(tiny_train({"--vocab", "320", "--steps", "1", "--quiet", "--save", folder + "/"}));
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  std::ofstream(folder + "/tokenizer.json") << remat_tok_test::tiny_json().dump();
  return folder;
}
// `remat train --init-from folder ...`: the model from the folder (no preset over it).
std::vector<std::string> train_from(const std::string& folder, std::vector<std::string> extra) {
  std::vector<std::string> a{"train", "--init-from", folder, "--eval-every", "0", "--no-progress"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}
std::string text_file(const TempDir& dir) {
  std::string t;
  for (int i = 0; i < 400; ++i) t += "ROMEO: hello world, hell and well.\n";
  return dir.write("play.txt", t);
}
}  // namespace

TEST(TokenizerJourney, TokenizeTrainSample) {
  TempDir dir;
  const std::string folder = make_folder(dir);
  const std::string txt = text_file(dir);
  const RunResult t = run_remat({"tokenize", "--tokenizer", folder, "--in", txt, "--out", dir / "play.bin"});
  ASSERT_EQ(t.exit_code, 0) << t.describe();
  const RunResult tr = run_remat(train_from(folder, {"--data", dir / "play.bin", "--steps", "20", "--batch", "4",
                                                     "--sample-tokens", "0", "--quiet", "--save", dir / "trained/"}));
  ASSERT_EQ(tr.exit_code, 0) << tr.describe();
  // --save writes weights and config, not the tokenizer: sample names it, or finds it beside the weights.
  const RunResult s = run_remat({"sample", "--init-from", dir / "trained", "--tokenizer", folder, "--prompt", "ROMEO:",
                                 "--tokens", "20", "--temperature", "0"});
  ASSERT_EQ(s.exit_code, 0) << s.describe();
  EXPECT_EQ(s.out.rfind("ROMEO:", 0), 0u) << s.out;  // text, not token ids
  EXPECT_EQ(s.out.find("(token ids)"), std::string::npos) << s.out;
  std::ofstream(dir / "trained/tokenizer.json") << remat_tok_test::tiny_json().dump();
  const RunResult found = run_remat({"sample", "--init-from", dir / "trained", "--prompt", "ROMEO:", "--tokens", "20",
                                     "--temperature", "0"});
  ASSERT_EQ(found.exit_code, 0) << found.describe();
  EXPECT_EQ(found.out, s.out);
}

TEST(TokenizerJourney, TextDataGoesThroughTheFoldersTokenizer) {
  TempDir dir;
  const std::string folder = make_folder(dir);
  const std::string txt = text_file(dir);
  const RunResult r = run_remat(train_from(folder, {"--data", txt, "--steps", "2", "--batch", "4", "--sample-tokens", "8"}));
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.out.find("through byte-level BPE"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("(token ids)"), std::string::npos) << r.out;  // the sample is decoded
  // The tokenizer's tables are data in the accounting allocator (Bpe.TablesAreInTheAccountingAllocator),
  // and in the prediction.
  EXPECT_NE(r.out.find("whole step: predicted = measured, to the byte"), std::string::npos) << r.out;
  // --tokenizer bytes keeps the old reading, byte by byte.
  const RunResult b = run_remat(train_from(folder, {"--data", txt, "--steps", "1", "--batch", "4", "--sample-tokens", "0",
                                                    "--tokenizer", "bytes"}));
  ASSERT_EQ(b.exit_code, 0) << b.describe();
  EXPECT_EQ(b.out.find("through byte-level BPE"), std::string::npos) << b.out;
}

// Text read through the tokenizer by train holds the ids `remat tokenize` writes (the document
// start, then the text's, in the same chunks): the two runs' losses are the same bits.
TEST(TokenizerJourney, TextDataTrainsAsItsTokenFileDoes) {
  TempDir dir;
  const std::string folder = make_folder(dir);
  const std::string txt = text_file(dir);
  ASSERT_EQ(run_remat({"tokenize", "--tokenizer", folder, "--in", txt, "--out", dir / "play.bin"}).exit_code, 0);
  std::vector<std::string> losses;
  for (const std::string data : {txt, dir / "play.bin"}) {
    const std::string m = dir / "m.jsonl";
    const RunResult r = run_remat(train_from(folder, {"--data", data, "--steps", "3", "--batch", "4", "--sample-tokens", "0",
                                                      "--quiet", "--metrics-out", m}));
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    std::string l;
    for (const std::string& line : split_lines(slurp(m))) l += json::parse(line).at("loss").dump() + " ";
    losses.push_back(l);
  }
  EXPECT_EQ(losses[0], losses[1]);
}

TEST(TokenizerJourney, ATokenizerLargerThanTheModelIsRefused) {
  TempDir dir;
  const std::string folder = make_folder(dir);
  const RunResult r = run_remat(tiny_train({"--vocab", "256", "--data", text_file(dir), "--steps", "1", "--tokenizer",
                                            folder}));
  EXPECT_EQ(r.exit_code, 1) << r.describe();
  EXPECT_NE(r.err.find("has more tokens than the model's embedding has rows"), std::string::npos) << r.err;
}

TEST(TokenizerJourney, AnEmptyTokenizerAndAnotherOnResumeAreRefused) {
  TempDir dir;
  const std::string folder = make_folder(dir);
  const RunResult e = run_remat({"sample", "--init-from", folder, "--tokenizer", "", "--tokens", "2"});
  EXPECT_EQ(e.exit_code, 1) << e.describe();
  EXPECT_NE(e.err.find("--tokenizer is empty"), std::string::npos) << e.err;
  const RunResult first = run_remat(train_from(folder, {"--data", text_file(dir), "--steps", "1", "--batch", "4",
                                                        "--sample-tokens", "0", "--save-dir", dir / "ck"}));
  ASSERT_EQ(first.exit_code, 0) << first.describe();
  const RunResult r = run_remat({"train", "--resume", dir / "ck", "--steps", "2", "--tokenizer", "bytes"});
  EXPECT_EQ(r.exit_code, 1) << r.describe();
  EXPECT_NE(r.err.find("--tokenizer 'bytes' (the checkpoint has '"), std::string::npos) << r.err;
}
