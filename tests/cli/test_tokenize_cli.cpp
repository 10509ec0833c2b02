// remat tokenize: text to an llm.c token file that remat's data loader and remat train read, the
// validation split, the same bytes at any --threads, and bad input as one-line errors that leave
// no file behind.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "data/dataset.h"
#include "run.h"

using namespace remat_cli_test;

namespace {
RunResult ok(const std::vector<std::string>& args) {
  RunResult r = run_remat(args);
  EXPECT_TRUE(r.exited() && r.exit_code == 0) << r.describe();
  return r;
}
std::string text() {
  std::string s;
  for (int i = 0; i < 400; ++i) s += "Line " + std::to_string(i) + ": to be, or not to be \xe2\x80\x94 that is the question.\n";
  return s;
}
}  // namespace

TEST(TokenizeCli, BytesToAnLlmcFileThatTrainReads) {
  TempDir d;
  const std::string in = d.write("input.txt", text());
  const RunResult r = ok({"tokenize", "--tokenizer", "bytes", "--in", in, "--out", d / "train.bin", "--val-fraction", "0.1"});
  EXPECT_NE(r.out.find("llm.c v1"), std::string::npos) << r.out;
  auto train = remat::data::TokenDataset::load(d / "train.bin");
  auto val = remat::data::TokenDataset::load(d / "val.bin");
  EXPECT_EQ(train.format(), remat::data::Format::LlmC);
  std::vector<uint32_t> all = train.to_vector(), v = val.to_vector();
  EXPECT_GT(v.size(), text().size() / 20);
  all.insert(all.end(), v.begin(), v.end());
  const std::string t = text();
  std::vector<uint32_t> want;
  for (unsigned char c : t) want.push_back(c);
  EXPECT_EQ(all, want);
  ok(tiny_train({"--data", d / "train.bin", "--steps", "1"}));
}

TEST(TokenizeCli, SameBytesAtAnyThreadCount) {
  TempDir d;
  std::string big;
  for (int i = 0; i < 8; ++i) big += text();
  const std::string in = d.write("input.txt", big);
  ok({"tokenize", "--tokenizer", "bytes", "--in", in, in, "--out", d / "one.bin", "--threads", "1"});
  ok({"tokenize", "--tokenizer", "bytes", "--in", in, in, "--out", d / "two.bin", "--threads", "2"});
  EXPECT_EQ(slurp(d / "one.bin"), slurp(d / "two.bin"));
  EXPECT_EQ(slurp(d / "one.bin").size(), 1024 + 2 * 2 * big.size());
}

TEST(TokenizeCli, BadInputIsOneLineAndWritesNothing) {
  TempDir d;
  const std::string in = d.write("input.txt", text());
  check_user_error(run_remat({"tokenize", "--in", in, "--out", d / "o.bin"}), 1, {"needs --tokenizer"});
  check_user_error(run_remat({"tokenize", "--tokenizer", d / "nope", "--in", in, "--out", d / "o.bin"}), 1,
                   {"[tokenizer]", "does not exist"});
  check_user_error(run_remat({"tokenize", "--tokenizer", d.write("tokenizer.json", "{\"model\": 5"), "--in", in, "--out",
                              d / "o.bin"}),
                   1, {"is not valid JSON"});
  check_user_error(run_remat({"tokenize", "--tokenizer", "bytes", "--in", in, d / "missing.txt", "--out", d / "o.bin"}), 1,
                   {"missing.txt"});
  check_user_error(run_remat({"tokenize", "--tokenizer", "bytes", "--in", in, "--out", d / "o.bin", "--val-fraction", "1"}),
                   1, {"--val-fraction"});
  check_user_error(run_remat({"tokenize", "--tokenizer", "bytes", "--in", in, "--out", in}), 1, {"--out"});
  EXPECT_EQ(d.listing(), (std::vector<std::string>{"input.txt", "tokenizer.json"}));
  EXPECT_EQ(slurp(in), text());
}
