// Text files to llm.c token files (tokenizer/token_file.h): the ids of the whole text whatever the
// chunk size, byte-identical files at any thread count, the validation split, the header as
// data/dataset.cpp reads it, and errors that leave no file behind.
#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "reference_tools.h"
#include "tiny_bpe.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/token_file.h"
#include "tokenizer/tokenizer.h"

using namespace remat::tok;
using namespace remat_tok_test;

namespace {

class TokenFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("remat_tokfile_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    std::ofstream(dir_ / "tokenizer.json") << tiny_json().dump();
    tok_ = load_tokenizer((dir_ / "tokenizer.json").string());
    text_ = corpus_text().substr(0, 30000) + hostile_text() + "\xff\xfe invalid \xc3";
    std::ofstream(dir_ / "a.txt", std::ios::binary) << text_;
    std::ofstream(dir_ / "b.txt", std::ios::binary) << "hello world\n";
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string p(const std::string& name) const { return (dir_ / name).string(); }

  // The header's three ints and the tokens of an llm.c file.
  static std::vector<int32_t> read_tokens(const std::string& path, int32_t* head) {
    const std::string b = slurp(path);
    EXPECT_GE(b.size(), 1024u);
    std::memcpy(head, b.data(), 12);
    std::vector<int32_t> ids;
    const size_t w = head[1] == 1 ? 2 : 4;
    for (size_t i = 1024; i + w <= b.size(); i += w) {
      uint32_t v = 0;
      std::memcpy(&v, b.data() + i, w);
      ids.push_back(int32_t(v));
    }
    EXPECT_EQ(ids.size(), size_t(head[2]));
    return ids;
  }

  fs::path dir_;
  std::unique_ptr<Tokenizer> tok_;
  std::string text_;
};

}  // namespace

TEST(SafeCut, OnlyBetweenAnAsciiLetterOrDigitAndSpace) {
  EXPECT_EQ(safe_cut("ab cd", 0), 2u);
  EXPECT_EQ(safe_cut("end.\n x", 0), std::string_view::npos);  // not after '.': LLaMA 3 makes ".\n" one piece
  EXPECT_EQ(safe_cut("end\n x", 0), 3u);
  EXPECT_EQ(safe_cut("42\t", 0), 2u);
  EXPECT_EQ(safe_cut("ab cd", 3), std::string_view::npos);
  EXPECT_EQ(safe_cut("  \n\nx", 0), std::string_view::npos);  // only white space before
  EXPECT_EQ(safe_cut("\xc3\xa9 x", 0), std::string_view::npos);  // after a multi-byte character: no
  EXPECT_EQ(safe_cut("x\n", 0), 1u);
}

TEST_F(TokenFile, ChunkedIdsAreTheWholeTextsAtAnyChunkSizeAndThreadCount) {
  std::vector<int32_t> want = {300};  // the document start, <|endoftext|>
  tok_->encode(text_, want);
  std::string first;
  for (size_t chunk : {size_t(1), size_t(7), size_t(100), size_t(4096), size_t(1) << 20}) {
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      TokenizeOptions opt;
      opt.chunk_bytes = chunk;
      const std::string out = p("out_" + std::to_string(chunk) + "_" + std::to_string(threads) + ".bin");
      const TokenizeResult r = tokenize_files(*tok_, {p("a.txt")}, out, "", opt);
      int32_t head[3];
      EXPECT_EQ(read_tokens(out, head), want) << "chunk " << chunk << ", " << threads << " threads";
      EXPECT_EQ(head[0], 20240520);
      EXPECT_EQ(head[1], 1);  // 301 ids: uint16
      EXPECT_EQ(r.train_tokens, want.size());
      EXPECT_EQ(r.bytes, text_.size());
      if (first.empty()) first = slurp(out);
      EXPECT_EQ(slurp(out), first);
    }
  }
}

TEST_F(TokenFile, EachFileIsADocumentAndTheValidationPartIsTheTextsEnd) {
  TokenizeOptions opt;
  opt.chunk_bytes = 1000;
  opt.val_fraction = 0.25;
  const TokenizeResult r = tokenize_files(*tok_, {p("a.txt"), p("b.txt")}, p("train.bin"), p("val.bin"), opt);
  int32_t h1[3], h2[3];
  std::vector<int32_t> all = read_tokens(p("train.bin"), h1);
  const std::vector<int32_t> val = read_tokens(p("val.bin"), h2);
  EXPECT_EQ(r.train_tokens, all.size());
  EXPECT_EQ(r.val_tokens, val.size());
  // About a quarter of the text, cut at a chunk boundary.
  EXPECT_GT(val.size(), all.size() / 5);
  EXPECT_LT(val.size(), all.size() / 2);
  all.insert(all.end(), val.begin(), val.end());
  std::vector<int32_t> want = {300};
  tok_->encode(text_, want);
  want.push_back(300);
  tok_->encode("hello world\n", want);
  EXPECT_EQ(all, want);
}

TEST_F(TokenFile, LargeVocabulariesWriteVersion2) {
  // A SentencePiece-free way to get more than 65,536 ids: the hand-made vocabulary with a far id.
  json j = tiny_json();
  j["added_tokens"].push_back({{"id", 70000}, {"content", "<|far|>"}, {"special", true}});
  std::ofstream(p("big.json")) << j.dump();
  const auto big = load_tokenizer(p("big.json"));
  std::ofstream(p("c.txt")) << "hell<|far|>o";
  tokenize_files(*big, {p("c.txt")}, p("v2.bin"), "", {});
  int32_t head[3];
  EXPECT_EQ(read_tokens(p("v2.bin"), head), (std::vector<int32_t>{300, 258, 70000, 'o'}));
  EXPECT_EQ(head[1], 2);
}

TEST_F(TokenFile, ErrorsLeaveTheOutputsAsTheyWere) {
  std::ofstream(p("train.bin")) << "old";
  const auto expect_error = [&](const std::function<void()>& f, const std::string& part) {
    try {
      f();
      ADD_FAILURE() << "no error; expected " << part;
    } catch (const remat::Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
    EXPECT_EQ(slurp(p("train.bin")), "old");
    EXPECT_FALSE(fs::exists(p("val.bin")));
  };
  expect_error([&] { tokenize_files(*tok_, {p("a.txt"), p("missing.txt")}, p("train.bin"), "", {}); }, "missing.txt");
  expect_error([&] { tokenize_files(*tok_, {p("a.txt"), dir_.string()}, p("train.bin"), "", {}); }, "");
  TokenizeOptions opt;
  opt.val_fraction = 0.5;
  std::ofstream(p("spaces.txt")) << "x" << std::string(1000, ' ');
  expect_error([&] { tokenize_files(*tok_, {p("spaces.txt")}, p("train.bin"), p("val.bin"), opt); },
               "the validation part is empty");
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
}
