// Byte-level BPE on a small hand-made vocabulary: merges in rank order, added tokens, both file
// layouts, the bytes tokenizer, and every bad input as a one-line remat::Error.
#include <gtest/gtest.h>

#include "core/allocator.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/byte_bpe.h"
#include "tokenizer/tokenizer.h"
#include "tiny_bpe.h"

using namespace remat::tok;
namespace fs = std::filesystem;
using nlohmann::json;
using namespace remat_tok_test;

namespace {

class Bpe : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("remat_bpe_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string put(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
    return (dir_ / name).string();
  }
  fs::path dir_;
};

// Runs f, which must throw remat::Error whose one-line message holds `part`.
void expect_error(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one with: " << part;
  } catch (const remat::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(part), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    EXPECT_TRUE(m.starts_with("[tokenizer]") || m.starts_with("[io]")) << m;
  }
}

}  // namespace

TEST_F(Bpe, MergesApplyInRankOrder) {
  auto t = load_tokenizer(put("tokenizer.json", tiny_json().dump()));
  EXPECT_EQ(t->vocab_size(), 301);
  EXPECT_EQ(t->encode("hello"), (std::vector<int32_t>{258, 'o'}));
  // " world": " w" then " wo" (its merge given as a pair), then bytes.
  EXPECT_EQ(t->encode("hello world"), (std::vector<int32_t>{258, 'o', 260, 'r', 'l', 'd'}));
  // "lll": the leftmost pair merges first.
  EXPECT_EQ(t->encode("lll"), (std::vector<int32_t>{257, 'l'}));
  EXPECT_EQ(t->decode(t->encode("hello world")), "hello world");
  // Space is byte 32, whose vocabulary string is "Ġ".
  EXPECT_EQ(mapped(" "), "\xc4\xa0");
}

TEST_F(Bpe, AddedTokensAreMatchedFirstAndNeverMerged) {
  auto t = load_tokenizer(put("tokenizer.json", tiny_json().dump()));
  ASSERT_TRUE(t->document_start().has_value());
  EXPECT_EQ(*t->document_start(), 300);
  EXPECT_EQ(t->encode("he<|endoftext|>llo"), (std::vector<int32_t>{256, 300, 257, 'o'}));
  EXPECT_EQ(t->decode(std::vector<int32_t>{256, 300, 257}), "he<|endoftext|>ll");
  EXPECT_EQ(t->encode("<|endoftext|"), t->encode(std::string("<|endoftext|")));  // not whole: plain text
}

TEST_F(Bpe, VocabJsonAndMergesTxtReadTheSame) {
  const json j = tiny_json();
  std::string merges = "#version: 0.2\n";
  for (const auto& m : j["model"]["merges"])
    merges += (m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>()) + "\n";
  put("vocab.json", j["model"]["vocab"].dump());
  put("merges.txt", merges);
  auto a = load_tokenizer(dir_.string());  // the folder: vocab.json + merges.txt
  auto b = load_tokenizer(put("tok.json", j.dump()));
  for (std::string s : {"hello world", "he<|endoftext|>ll", "\xff\xfe bytes \xc3"}) {
    EXPECT_EQ(a->encode(s), b->encode(s)) << s;
    EXPECT_EQ(a->decode(a->encode(s)), s);
  }
}

TEST_F(Bpe, BytesTokenizerRoundTripsAnyBytes) {
  auto t = load_tokenizer("bytes");
  std::string all;
  for (int b = 0; b < 256; ++b) all += char(b);
  EXPECT_EQ(t->encode(all).size(), 256u);
  EXPECT_EQ(t->decode(t->encode(all)), all);
  EXPECT_EQ(t->vocab_size(), 256);
  expect_error([&] { t->decode(std::vector<int32_t>{65, 256}); }, "token id 256 is outside the vocabulary");
}

TEST_F(Bpe, TablesAreInTheAccountingAllocator) {
  remat::Allocator& a = remat::Allocator::global();
  const size_t before = a.active(remat::Category::Data);
  {
    const auto t = load_tokenizer(put("tokenizer.json", tiny_json().dump()));
    EXPECT_GT(t->table_bytes(), 301u * sizeof(uint32_t));  // at least the offsets of 301 ids
    EXPECT_EQ(a.active(remat::Category::Data) - before, t->table_bytes());
    const auto names = a.by_name();
    for (const char* n : {"tokenizer.vocab", "tokenizer.merges", "tokenizer.added"})
      EXPECT_GT(names.at(n).active, 0u) << n;
  }
  EXPECT_EQ(a.active(remat::Category::Data), before);  // all given back
}

TEST_F(Bpe, BadFilesAreOneLineErrors) {
  expect_error([&] { load_tokenizer(put("tokenizer.json", "{\"model\": {")); }, "is not valid JSON");
  expect_error([&] { load_tokenizer(put("t1.json", "[1, 2]")); }, "has no \"model\" object");
  json j = tiny_json();
  j["model"]["merges"].push_back("h zz");
  expect_error([&] { load_tokenizer(put("t2.json", j.dump())); }, "names the unknown token 'zz'");
  j = tiny_json();
  j["model"]["merges"].push_back("l o");
  expect_error([&] { load_tokenizer(put("t3.json", j.dump())); }, "makes 'lo', which is not in the vocabulary");
  j = tiny_json();
  j["model"]["type"] = "Unigram";
  expect_error([&] { load_tokenizer(put("t4.json", j.dump())); }, "holds a Unigram model");
  j = tiny_json();
  j["pre_tokenizer"] = {{"type", "Metaspace"}};
  expect_error([&] { load_tokenizer(put("t5.json", j.dump())); }, "is not supported");
  // LLaMA 3's layout (Split on a pattern, then ByteLevel) with a pattern remat does not know.
  j["pre_tokenizer"] = json::parse(R"({"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "\\p{L}+|\\s+"}, "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})");
  expect_error([&] { load_tokenizer(put("t5b.json", j.dump())); }, "pattern '\\p{L}+|\\s+' is not one remat knows");
  j = tiny_json();
  j["model"]["vocab"]["x"] = "seven";
  expect_error([&] { load_tokenizer(put("t6.json", j.dump())); }, "not an integer");
  j = tiny_json();
  j["model"]["vocab"]["\xe2\x82\xac"] = 270;  // a character outside the byte map
  expect_error([&] { load_tokenizer(put("t7.json", j.dump())); }, "is not byte-level");
  j = tiny_json();
  j["model"]["vocab"].erase(mapped("A"));
  expect_error([&] { load_tokenizer(put("t8.json", j.dump())); }, "no token for byte 65");
  j = tiny_json();
  j["model"]["merges"] = 5;
  expect_error([&] { load_tokenizer(put("t9.json", j.dump())); }, "model.merges is not a list");
  put("merges.txt", "h e\nnot-two-tokens\n");
  put("vocab.json", tiny_json()["model"]["vocab"].dump());
  expect_error([&] { load_tokenizer((dir_ / "vocab.json").string()); }, "merge 2 'not-two-tokens' is not two tokens");
  fs::remove(dir_ / "merges.txt");
  expect_error([&] { load_tokenizer((dir_ / "vocab.json").string()); }, "has no 'merges.txt' beside it");
}

TEST_F(Bpe, WhereTheTokenizerIsNotAreOneLineErrors) {
  expect_error([&] { load_tokenizer((dir_ / "nope").string()); }, "does not exist");
  expect_error([&] { load_tokenizer(dir_.string()); }, "holds no tokenizer");
  expect_error([&] { load_tokenizer(put("notes.txt", "hi")); }, "cannot tell what kind of tokenizer");
  expect_error([&] { load_tokenizer(put("broken.model", "not a model")); }, "cannot read SentencePiece model");
}

TEST_F(Bpe, IdsOutsideTheVocabularyAndTooSmallModels) {
  auto t = load_tokenizer(put("tokenizer.json", tiny_json().dump()));
  expect_error([&] { t->decode(std::vector<int32_t>{301}); }, "token id 301 is outside the vocabulary");
  expect_error([&] { t->decode(std::vector<int32_t>{-1}); }, "token id -1 is outside the vocabulary");
  expect_error([&] { t->decode(std::vector<int32_t>{280}); }, "token id 280 is not in the vocabulary");  // a gap
  check_fits(*t, 301);
  expect_error([&] { check_fits(*t, 300); }, "has more tokens than the model's embedding has rows (300)");
}
