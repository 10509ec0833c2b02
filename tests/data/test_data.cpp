#include "data/dataset.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "core/allocator.h"
#include "core/error.h"
#include "test_util.h"

namespace fs = std::filesystem;
using remat::data::BatchSampler;
using remat::data::TokenDataset;

namespace {

using remat::testing_util::bytes_of;
using remat::testing_util::error_of;

class DataTest : public remat::testing_util::TempDirTest {
 protected:
  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream(dir_ / name, std::ios::binary) << bytes;
    return (dir_ / name).string();
  }
};


std::string llmc_file(int32_t version, int32_t count, const std::vector<uint16_t>& tokens) {
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520;
  header[1] = version;
  header[2] = count;
  return bytes_of(header) + bytes_of(tokens);
}

// Tokens 0, 1, 2, ... so a window's start can be read off its first input.
TokenDataset iota_dataset(size_t n) {
  std::vector<uint16_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = uint16_t(i);
  return TokenDataset::from_tokens(t, "iota", false);
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace

TEST_F(DataTest, TextFileIsByteLevel) {
  auto path = write("t.txt", std::string("Hi!\n\xff", 5));
  TokenDataset d = TokenDataset::from_text_file(path);
  ASSERT_EQ(d.size(), 5u);
  EXPECT_EQ(std::vector<uint16_t>(d.tokens().begin(), d.tokens().end()), (std::vector<uint16_t>{72, 105, 33, 10, 255}));
  EXPECT_EQ(d[1], 105);
  EXPECT_EQ(d.max_token(), 255);
  EXPECT_TRUE(d.byte_level());
  EXPECT_NE(d.description().find("5 tokens"), std::string::npos) << d.description();
  EXPECT_EQ(TokenDataset::load(path).size(), 5u);  // not .bin -> text
}

TEST_F(DataTest, TextFileErrors) {
  std::string msg = error_of([&] { TokenDataset::from_text_file((dir_ / "missing.txt").string()); });
  EXPECT_NE(msg.find("[data] text file"), std::string::npos) << msg;
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
  EXPECT_NE(msg.find("built-in corpus"), std::string::npos) << msg;
  msg = error_of([&] { TokenDataset::from_text_file(dir_.string()); });
  EXPECT_NE(msg.find("is a directory"), std::string::npos) << msg;
  msg = error_of([&] { TokenDataset::from_text_file(write("e.txt", "")); });
  EXPECT_NE(msg.find("is empty"), std::string::npos) << msg;
}

TEST_F(DataTest, NanoGptTokenFile) {
  std::vector<uint16_t> toks = {1, 50256, 300, 0, 65535, 7};
  auto path = write("train.bin", bytes_of(toks));
  TokenDataset d = TokenDataset::load(path);
  EXPECT_EQ(std::vector<uint16_t>(d.tokens().begin(), d.tokens().end()), toks);
  EXPECT_EQ(d.max_token(), 65535);
  EXPECT_FALSE(d.byte_level());
  EXPECT_NE(d.description().find("raw uint16, 6 tokens"), std::string::npos) << d.description();
}

TEST_F(DataTest, LlmcTokenFile) {
  std::vector<uint16_t> toks = {50256, 464, 2068, 7586, 21831};
  TokenDataset d = TokenDataset::from_token_file(write("tiny_train.bin", llmc_file(1, 5, toks)));
  EXPECT_EQ(std::vector<uint16_t>(d.tokens().begin(), d.tokens().end()), toks);
  EXPECT_EQ(d.max_token(), 50256);
  EXPECT_NE(d.description().find("llm.c, 5 tokens"), std::string::npos) << d.description();
}

TEST_F(DataTest, TokenFileErrors) {
  auto msg = error_of([&] { TokenDataset::from_token_file(write("odd.bin", "abcde")); });
  EXPECT_NE(msg.find("odd byte count (5)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("2 bytes per token"), std::string::npos) << msg;
  EXPECT_NE(msg.find("hint:"), std::string::npos) << msg;
  msg = error_of([&] { TokenDataset::from_token_file(write("empty.bin", "")); });
  EXPECT_NE(msg.find((dir_ / "empty.bin").string() + "' is empty"), std::string::npos) << msg;
  msg = error_of([&] { TokenDataset::load((dir_ / "nope.bin").string()); });
  EXPECT_NE(msg.find("token file"), std::string::npos) << msg;
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
  msg = error_of([&] { TokenDataset::from_token_file(write("short.bin", llmc_file(1, 6, {1, 2, 3, 4, 5}))); });
  EXPECT_NE(msg.find("header says 6 tokens"), std::string::npos) << msg;
  EXPECT_NE(msg.find("10 bytes follow"), std::string::npos) << msg;
  msg = error_of([&] { TokenDataset::from_token_file(write("v2.bin", llmc_file(2, 2, {1, 2, 3, 4}))); });
  EXPECT_NE(msg.find("version 2"), std::string::npos) << msg;
  msg = error_of([&] { TokenDataset::from_token_file(write("v9.bin", llmc_file(9, 2, {1, 2}))); });
  EXPECT_NE(msg.find("unknown version 9"), std::string::npos) << msg;
}

TEST_F(DataTest, AccountedAndMovable) {
  auto& A = remat::Allocator::global();
  const size_t before = A.active(remat::Category::Data);
  {
    TokenDataset d = iota_dataset(1000);
    EXPECT_EQ(A.active(remat::Category::Data), before + 2000);
    TokenDataset moved = std::move(d);
    EXPECT_EQ(d.size(), 0u);
    EXPECT_EQ(moved.size(), 1000u);
    EXPECT_EQ(A.active(remat::Category::Data), before + 2000);
    TokenDataset other = iota_dataset(10);
    other = std::move(moved);
    EXPECT_EQ(other[999], 999);
    EXPECT_EQ(A.active(remat::Category::Data), before + 2000);
  }
  EXPECT_EQ(A.active(remat::Category::Data), before);
}

TEST(DataBuiltin, CorpusIsEmbedded) {
  TokenDataset d = TokenDataset::builtin();
  EXPECT_GT(d.size(), 100000u);
  EXPECT_EQ(d.size(), 199994u);
  EXPECT_TRUE(d.byte_level());
  EXPECT_EQ(d.max_token(), 122);  // 'z': the excerpt is plain ASCII
  EXPECT_EQ(d.description(), "built-in corpus (shakespeare excerpt, 199,994 tokens)");
  std::string text = remat::data::builtin_corpus_text();
  EXPECT_EQ(text.substr(0, 14), "First Citizen:");
  EXPECT_EQ(text.back(), '\n');
  for (size_t i = 0; i < text.size(); i += 997) ASSERT_EQ(d[i], uint16_t((unsigned char)text[i]));
  EXPECT_EQ(TokenDataset::load("").size(), d.size());
  // The generated builtin_corpus.cpp matches the excerpt checked into the repo...
  fs::path excerpt = fs::path(__FILE__).parent_path() / "../../src/data/corpus/shakespeare_excerpt.txt";
  if (fs::exists(excerpt)) {
    EXPECT_EQ(text, read_text(excerpt.string()));
  }
  // ...and the excerpt is the head of tinyshakespeare.
  fs::path full = fs::path(REMAT_SHARED_DIR) / "data/tinyshakespeare.txt";
  if (!fs::exists(full)) GTEST_SKIP() << "../shared/data/tinyshakespeare.txt is absent: prefix check skipped";
  EXPECT_EQ(read_text(full.string()).substr(0, text.size()), text);
}

TEST(DataSplit, SizesAndContents) {
  TokenDataset d = iota_dataset(1000);
  auto [train, val] = d.split(0.1, 16);
  EXPECT_EQ(train.size(), 900u);
  EXPECT_EQ(val.size(), 100u);
  EXPECT_EQ(train[0], 0);
  EXPECT_EQ(train[899], 899);
  EXPECT_EQ(val[0], 900);
  EXPECT_EQ(val[99], 999);
  EXPECT_NE(val.description().find("val split (100 tokens)"), std::string::npos) << val.description();
  auto [t2, v2] = d.split(0.0169, 16);  // round(16.9) = 17 = T + 1: just enough
  EXPECT_EQ(v2.size(), 17u);
  std::string msg = error_of([&] { d.split(0.01, 16); });
  EXPECT_NE(msg.find("leaves 10 validation tokens, fewer than one window of T + 1 = 17"), std::string::npos) << msg;
  msg = error_of([&] { d.split(0.99, 16); });
  EXPECT_NE(msg.find("training tokens"), std::string::npos) << msg;
  msg = error_of([&] { d.split(1.5, 16); });
  EXPECT_NE(msg.find("not between 0 and 1"), std::string::npos) << msg;
}

TEST(DataSampler, DeterministicWindowsAndShiftedTargets) {
  TokenDataset d = iota_dataset(5000);
  const int64_t B = 4, T = 32;
  BatchSampler s(d, B, T, 1234), same(d, B, T, 1234), other(d, B, T, 99);
  std::vector<int32_t> in(B * T), tg(B * T), in2(B * T), tg2(B * T);
  s.sample(7, in.data(), tg.data());
  same.sample(7, in2.data(), tg2.data());
  EXPECT_EQ(in, in2);
  EXPECT_EQ(tg, tg2);
  for (int64_t b = 0; b < B; ++b) {
    const int32_t start = in[b * T];
    EXPECT_EQ(uint64_t(start), s.window_start(7, b));
    for (int64_t t = 0; t < T; ++t) {
      EXPECT_EQ(in[b * T + t], start + t);
      EXPECT_EQ(tg[b * T + t], start + t + 1);  // targets = inputs shifted by one
    }
  }
  other.sample(7, in2.data(), tg2.data());
  EXPECT_NE(in, in2);
  s.sample(8, in2.data(), tg2.data());
  EXPECT_NE(in, in2);
  EXPECT_NE(s.window_start(8, 0), s.window_start(8, 1));
  // Starts cover [0, n - T - 1].
  uint64_t lo = ~0ull, hi = 0;
  for (uint64_t step = 0; step < 2000; ++step)
    for (int64_t b = 0; b < B; ++b) {
      uint64_t w = s.window_start(step, b);
      lo = std::min(lo, w);
      hi = std::max(hi, w);
    }
  EXPECT_LT(lo, 20u);
  EXPECT_GT(hi, 5000u - 32 - 20);
  EXPECT_LE(hi, 5000u - 32 - 1);
}

TEST(DataSampler, ExactlyOneWindow) {
  TokenDataset d = iota_dataset(17);
  BatchSampler s(d, 2, 16, 5);
  std::vector<int32_t> in(32), tg(32);
  s.sample(3, in.data(), tg.data());
  EXPECT_EQ(in[0], 0);
  EXPECT_EQ(in[16], 0);
  EXPECT_EQ(tg[31], 16);
}

TEST(DataSampler, TooShortDataset) {
  TokenDataset d = iota_dataset(10);
  std::string msg = error_of([&] { BatchSampler s(d, 2, 16, 0); });
  EXPECT_NE(msg.find("has 10 tokens"), std::string::npos) << msg;
  EXPECT_NE(msg.find("T = 16"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--seq"), std::string::npos) << msg;
}

TEST(DataSampler, SequentialWindowsTileAndWrap) {
  TokenDataset d = iota_dataset(100);
  BatchSampler s(d, 4, 10, 0);
  EXPECT_EQ(s.num_windows(), 9);  // starts 0, 10, ..., 80 (the window at 90 would need token 100)
  EXPECT_EQ(s.num_sequential_batches(), 3);
  std::vector<int32_t> in(40), tg(40);
  s.sequential(0, in.data(), tg.data());
  EXPECT_EQ((std::vector<int32_t>{in[0], in[10], in[20], in[30]}), (std::vector<int32_t>{0, 10, 20, 30}));
  EXPECT_EQ(tg[9], 10);
  s.sequential(2, in.data(), tg.data());
  EXPECT_EQ((std::vector<int32_t>{in[0], in[10], in[20], in[30]}), (std::vector<int32_t>{80, 0, 10, 20}));
  EXPECT_EQ(tg[9], 90);
}

TEST(DataDecode, PrintableBytes) {
  std::vector<int32_t> t = {'H', 'i', '\n', 7, 200, -1, '\t', 300, '~', ' '};
  EXPECT_EQ(remat::data::decode_bytes(t), "Hi\n???\t?~ ");
  EXPECT_EQ(remat::data::decode_bytes({}), "");
}
