#include "data/dataset.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <sstream>

#include "core/allocator.h"
#include "core/error.h"
#include "test_util.h"

namespace fs = std::filesystem;
using remat::data::BatchSampler;
using remat::data::Format;
using remat::data::TokenDataset;

namespace {

using remat::testing_util::bytes_of;
using remat::testing_util::error_of;

class DataTest : public remat::testing_util::TempDirTest {
 protected:
  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream(dir_ / name, std::ios::binary | std::ios::trunc) << bytes;
    return (dir_ / name).string();
  }
};

std::string llmc_header(int32_t version, int32_t count) {
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520;
  header[1] = version;
  header[2] = count;
  return bytes_of(header);
}

std::string llmc_file(int32_t version, int32_t count, const std::vector<uint16_t>& tokens) {
  return llmc_header(version, count) + bytes_of(tokens);
}

std::string llmc_file32(int32_t count, const std::vector<uint32_t>& tokens) {
  return llmc_header(2, count) + bytes_of(tokens);
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

// The error is one line, names the file and carries a hint.
void expect_good_error(const std::string& msg, const std::string& path) {
  EXPECT_EQ(msg.rfind("[data] ", 0), 0u) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_NE(msg.find("'" + path + "'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(hint: "), std::string::npos) << msg;
}

}  // namespace

TEST_F(DataTest, TextFileIsByteLevel) {
  auto path = write("t.txt", std::string("Hi!\n\xff", 5));
  TokenDataset d = TokenDataset::from_text_file(path);
  ASSERT_EQ(d.size(), 5u);
  EXPECT_EQ(d.to_vector(), (std::vector<uint32_t>{72, 105, 33, 10, 255}));
  EXPECT_EQ(std::vector<uint32_t>(d.tokens().begin(), d.tokens().end()), d.to_vector());
  EXPECT_EQ(d[1], 105u);
  EXPECT_EQ(d.max_token(), 255);
  EXPECT_TRUE(d.byte_level());
  EXPECT_EQ(d.format(), Format::Text);
  EXPECT_EQ(d.width(), 4);
  EXPECT_FALSE(d.mapped());
  EXPECT_EQ(d.buffer_bytes(), 20u);
  EXPECT_NE(d.description().find("5 tokens"), std::string::npos) << d.description();
  EXPECT_EQ(TokenDataset::load(path).size(), 5u);  // not .bin, no magic -> text
  EXPECT_EQ(TokenDataset::load(path).format(), Format::Text);
}

TEST_F(DataTest, TextFileErrors) {
  std::string msg = error_of([&] { TokenDataset::from_text_file((dir_ / "missing.txt").string()); });
  EXPECT_NE(msg.find("[data] text file"), std::string::npos) << msg;
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
  EXPECT_NE(msg.find("built-in corpus"), std::string::npos) << msg;
  expect_good_error(msg, (dir_ / "missing.txt").string());
  msg = error_of([&] { TokenDataset::from_text_file(dir_.string()); });
  EXPECT_NE(msg.find("is a directory"), std::string::npos) << msg;
  msg = error_of([&] { TokenDataset::from_text_file(write("e.txt", "")); });
  EXPECT_NE(msg.find("is empty"), std::string::npos) << msg;
  expect_good_error(msg, p("e.txt"));
  msg = error_of([&] { TokenDataset::load("/dev/null"); });
  EXPECT_NE(msg.find("not a regular file"), std::string::npos) << msg;
  // A text file is widened into an accounted buffer: a memory limit applies, and the error names it.
  auto& A = remat::Allocator::global();
  const size_t old_limit = A.limit();
  auto big = write("big.txt", std::string(1000, 'a'));
  A.set_limit(A.active_total() + 1000);
  msg = error_of([&] { TokenDataset::load(big); });
  A.set_limit(old_limit);
  EXPECT_NE(msg.find("(1,000 bytes) does not fit in memory as uint32 tokens"), std::string::npos) << msg;
  expect_good_error(msg, big);
  EXPECT_EQ(TokenDataset::load(big).size(), 1000u);
}

TEST_F(DataTest, NanoGptTokenFile) {
  std::vector<uint16_t> toks = {1, 50256, 300, 0, 65535, 7};
  auto path = write("train.bin", bytes_of(toks));
  TokenDataset d = TokenDataset::load(path);
  EXPECT_EQ(d.to_vector(), std::vector<uint32_t>(toks.begin(), toks.end()));
  EXPECT_EQ(std::vector<uint16_t>(d.tokens_u16().begin(), d.tokens_u16().end()), toks);
  EXPECT_EQ(d[4], 65535u);
  EXPECT_EQ(d.max_token(), 65535);
  EXPECT_FALSE(d.byte_level());
  EXPECT_EQ(d.format(), Format::U16);
  EXPECT_EQ(d.width(), 2);  // mapped as-is, not widened
  EXPECT_TRUE(d.mapped());
  EXPECT_EQ(d.mapped_bytes(), 12u);
  EXPECT_EQ(d.buffer_bytes(), 0u);
  EXPECT_EQ(d.description(), "raw uint16 token file '" + path + "' (6 tokens)");
  std::vector<int32_t> w(4);
  d.copy_window(1, 4, w.data());
  EXPECT_EQ(w, (std::vector<int32_t>{50256, 300, 0, 65535}));
  // tokens() is the uint32 view: a uint16 mapping has none, and says so.
  std::string msg = error_of([&] { (void)d.tokens(); });
  EXPECT_NE(msg.find("uint16 tokens mapped as-is"), std::string::npos) << msg;
  EXPECT_NE(msg.find("copy_window"), std::string::npos) << msg;
  msg = error_of([&] { d.copy_window(3, 4, w.data()); });
  EXPECT_NE(msg.find("past the end"), std::string::npos) << msg;
}

TEST_F(DataTest, LlmcV1TokenFile) {
  std::vector<uint16_t> toks = {50256, 464, 2068, 7586, 21831};
  auto path = write("tiny_train.bin", llmc_file(1, 5, toks));
  for (const TokenDataset& d : {TokenDataset::from_token_file(path), TokenDataset::load(path)}) {
    EXPECT_EQ(d.to_vector(), std::vector<uint32_t>(toks.begin(), toks.end()));
    EXPECT_EQ(d.max_token(), 50256);
    EXPECT_EQ(d.format(), Format::LlmC);
    EXPECT_EQ(d.width(), 2);
    EXPECT_TRUE(d.mapped());
    EXPECT_EQ(d.mapped_bytes(), 1024u + 10u);
    EXPECT_EQ(d.description(), "llm.c v1 token file '" + path + "' (5 uint16 tokens)");
    // The tokens are read in place, right after the header.
    EXPECT_EQ(std::vector<uint16_t>(d.tokens_u16().begin(), d.tokens_u16().end()), toks);
  }
}

TEST_F(DataTest, LlmcV2RoundTrip) {
  // LLaMA 3 ids above 65,535, and the extremes of uint32.
  std::vector<uint32_t> toks = {128000, 9906, 65535, 65536, 128255, 0, 100000, 1, 70000, 128001};
  for (uint32_t i = 0; i < 1000; ++i) toks.push_back((i * 2654435761u) % 128256u);
  auto path = write("llama3_train.bin", llmc_file32(int32_t(toks.size()), toks));
  TokenDataset d = TokenDataset::load(path);
  ASSERT_EQ(d.size(), toks.size());
  EXPECT_EQ(d.format(), Format::LlmC);
  EXPECT_EQ(d.width(), 4);
  EXPECT_TRUE(d.mapped());
  EXPECT_EQ(d.to_vector(), toks);
  EXPECT_EQ(std::vector<uint32_t>(d.tokens().begin(), d.tokens().end()), toks);
  EXPECT_EQ(d[3], 65536u);
  EXPECT_EQ(d[4], 128255u);
  EXPECT_EQ(d.max_token(), 128255);
  EXPECT_EQ(d.description(), "llm.c v2 token file '" + path + "' (1,010 uint32 tokens)");
  std::vector<int32_t> w(5);
  d.copy_window(2, 5, w.data());
  EXPECT_EQ(w, (std::vector<int32_t>{65535, 65536, 128255, 0, 100000}));
  EXPECT_NO_THROW(d.check_vocab(128256));
  std::string msg = error_of([&] { d.check_vocab(65536); });
  EXPECT_NE(msg.find("the data holds token 128255 but the vocabulary is 65536"), std::string::npos) << msg;
  EXPECT_NE(msg.find("use --vocab 128256 or more"), std::string::npos) << msg;
  expect_good_error(msg, path);
  msg = error_of([&] { (void)d.tokens_u16(); });
  EXPECT_NE(msg.find("uint32"), std::string::npos) << msg;
  // The whole uint32 range survives; max_token is an int64.
  TokenDataset big = TokenDataset::load(write("big.bin", llmc_file32(2, {4294967295u, 7})));
  EXPECT_EQ(big.max_token(), 4294967295ll);
  EXPECT_EQ(big[0], 4294967295u);
}

TEST_F(DataTest, MagicDetectionIgnoresTheName) {
  std::vector<uint16_t> t1 = {5, 6, 7, 8};
  std::vector<uint32_t> t2 = {70000, 1, 2, 3};
  for (const char* name : {"DATA.BIN", "tokens", "tokens.txt", "x.Bin"}) {
    TokenDataset a = TokenDataset::load(write(name, llmc_file(1, 4, t1)));
    EXPECT_EQ(a.format(), Format::LlmC) << name;
    EXPECT_EQ(a.to_vector(), std::vector<uint32_t>(t1.begin(), t1.end())) << name;
    TokenDataset b = TokenDataset::load(write(name, llmc_file32(4, t2)));
    EXPECT_EQ(b.format(), Format::LlmC) << name;
    EXPECT_EQ(b.to_vector(), t2) << name;
    EXPECT_EQ(TokenDataset::from_token_file(p(name)).format(), Format::LlmC) << name;
  }
  // Without the magic: .bin in any case is raw uint16, anything else is text.
  std::vector<uint16_t> raw = {1, 2, 3, 40000};
  for (const char* name : {"TRAIN.BIN", "val.Bin", "a.bin"}) {
    TokenDataset d = TokenDataset::load(write(name, bytes_of(raw)));
    EXPECT_EQ(d.format(), Format::U16) << name;
    EXPECT_EQ(d.to_vector(), std::vector<uint32_t>(raw.begin(), raw.end())) << name;
  }
  for (const char* name : {"train", "train.bin.txt", "bin"}) {
    TokenDataset d = TokenDataset::load(write(name, bytes_of(raw)));
    EXPECT_EQ(d.format(), Format::Text) << name;
    EXPECT_EQ(d.size(), 8u) << name;
  }
  // from_token_file: raw uint16 whatever the name.
  EXPECT_EQ(TokenDataset::from_token_file(p("train")).format(), Format::U16);
}

TEST_F(DataTest, ForcedFormats) {
  std::vector<uint16_t> raw = {1, 2, 3, 40000};
  auto bin = write("train.bin", bytes_of(raw));
  // Text forced on a .bin file: byte-level, one token per byte.
  TokenDataset t = TokenDataset::load(bin, Format::Text);
  EXPECT_EQ(t.format(), Format::Text);
  EXPECT_TRUE(t.byte_level());
  EXPECT_EQ(t.size(), 8u);
  EXPECT_EQ(t[6], 0x40u);  // 40000 = 0x9c40, little-endian
  EXPECT_EQ(t[7], 0x9cu);
  // U16 forced on any name.
  TokenDataset u = TokenDataset::load(write("raw.txt", bytes_of(raw)), Format::U16);
  EXPECT_EQ(u.format(), Format::U16);
  EXPECT_EQ(u.to_vector(), std::vector<uint32_t>(raw.begin(), raw.end()));
  // U16 forced on an llm.c file: the header is read as tokens (the user asked for it).
  auto llmc = write("l.bin", llmc_file(1, 4, raw));
  TokenDataset h = TokenDataset::load(llmc, Format::U16);
  EXPECT_EQ(h.size(), 512u + 4u);
  EXPECT_EQ(h[512], 1u);
  EXPECT_EQ(TokenDataset::load(llmc, Format::LlmC).size(), 4u);
  EXPECT_EQ(TokenDataset::load(llmc, Format::Text).size(), 1024u + 8u);
  // U16 on an odd byte count.
  auto odd = write("odd.txt", "abcde");
  std::string msg = error_of([&] { TokenDataset::load(odd, Format::U16); });
  EXPECT_NE(msg.find("odd byte count (5)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--data-format text"), std::string::npos) << msg;
  expect_good_error(msg, odd);
  // LlmC without the magic.
  msg = error_of([&] { TokenDataset::load(bin, Format::LlmC); });
  EXPECT_NE(msg.find("is not an llm.c token file"), std::string::npos) << msg;
  EXPECT_NE(msg.find("magic 20240520"), std::string::npos) << msg;
  expect_good_error(msg, bin);
  msg = error_of([&] { TokenDataset::load(write("two.bin", "ab"), Format::LlmC); });
  EXPECT_NE(msg.find("too short to hold the magic"), std::string::npos) << msg;
  expect_good_error(msg, p("two.bin"));
  // "" is the built-in corpus for auto and text only.
  EXPECT_EQ(TokenDataset::load("", Format::Text).size(), TokenDataset::builtin().size());
  msg = error_of([&] { TokenDataset::load("", Format::LlmC); });
  EXPECT_NE(msg.find("data format llmc needs a file"), std::string::npos) << msg;
  // Names.
  for (Format f : {Format::Auto, Format::Text, Format::U16, Format::LlmC})
    EXPECT_EQ(remat::data::parse_format(remat::data::format_name(f)), f);
  EXPECT_EQ(remat::data::parse_format("LLM.C"), Format::LlmC);
  msg = error_of([&] { remat::data::parse_format("utf8"); });
  EXPECT_NE(msg.find("unknown data format 'utf8'"), std::string::npos) << msg;
}

TEST_F(DataTest, TokenFileErrors) {
  auto msg = error_of([&] { TokenDataset::from_token_file(write("odd.bin", "abcde")); });
  EXPECT_NE(msg.find("odd byte count (5)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("2 bytes per token"), std::string::npos) << msg;
  expect_good_error(msg, p("odd.bin"));
  msg = error_of([&] { TokenDataset::load(write("odd.BIN", "abcde")); });
  EXPECT_NE(msg.find("odd byte count (5)"), std::string::npos) << msg;
  msg = error_of([&] { TokenDataset::load((dir_ / "nope.bin").string()); });
  EXPECT_NE(msg.find("token file"), std::string::npos) << msg;
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
  expect_good_error(msg, p("nope.bin"));
}

TEST_F(DataTest, EmptyFiles) {
  auto path = write("empty.bin", "");
  for (Format f : {Format::Auto, Format::Text, Format::U16, Format::LlmC}) {
    std::string msg = error_of([&] { TokenDataset::load(path, f); });
    EXPECT_NE(msg.find(path + "' is empty"), std::string::npos) << msg;
    expect_good_error(msg, path);
  }
  // An llm.c file with a valid header and no tokens.
  auto zero = write("zero.bin", llmc_header(1, 0));
  std::string msg = error_of([&] { TokenDataset::load(zero); });
  EXPECT_NE(msg.find("llm.c v1 token file '" + zero + "' holds zero tokens"), std::string::npos) << msg;
  expect_good_error(msg, zero);
  msg = error_of([&] { TokenDataset::load(write("zero2", llmc_header(2, 0))); });
  EXPECT_NE(msg.find("holds zero tokens"), std::string::npos) << msg;
}

TEST_F(DataTest, LlmcCountMismatch) {
  auto path = write("short.bin", llmc_file(1, 6, {1, 2, 3, 4, 5}));
  std::string msg = error_of([&] { TokenDataset::from_token_file(path); });
  EXPECT_NE(msg.find("header says 6 tokens (1,036 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("the file is 1,034 bytes (10 bytes follow the header)"), std::string::npos) << msg;
  expect_good_error(msg, path);
  // A v1 count read as v2: 4 uint32 tokens are 8 uint16 tokens.
  path = write("v2.bin", llmc_file32(8, {1, 2, 3, 4}));
  msg = error_of([&] { TokenDataset::load(path); });
  EXPECT_NE(msg.find("llm.c v2 token file"), std::string::npos) << msg;
  EXPECT_NE(msg.find("header says 8 tokens (1,056 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("the file is 1,040 bytes"), std::string::npos) << msg;
  // Too long is as wrong as too short.
  msg = error_of([&] { TokenDataset::load(write("long.bin", llmc_file(1, 2, {1, 2, 3}))); });
  EXPECT_NE(msg.find("header says 2 tokens"), std::string::npos) << msg;
  msg = error_of([&] { TokenDataset::load(write("neg.bin", llmc_file(1, -3, {1, 2}))); });
  EXPECT_NE(msg.find("token count is negative (-3)"), std::string::npos) << msg;
  expect_good_error(msg, p("neg.bin"));
  msg = error_of([&] { TokenDataset::load(write("huge.bin", llmc_file(2, 2147483647, {1, 2}))); });
  EXPECT_NE(msg.find("header says 2,147,483,647 tokens (8,589,935,612 bytes"), std::string::npos) << msg;
}

TEST_F(DataTest, LlmcUnknownVersion) {
  for (int32_t v : {9, 0, 3, -1, 20240520}) {
    auto path = write("v.bin", llmc_file(v, 2, {1, 2}));
    std::string msg = error_of([&] { TokenDataset::load(path); });
    EXPECT_NE(msg.find("unknown version " + std::to_string(v)), std::string::npos) << msg;
    EXPECT_NE(msg.find("version 2 (uint32 tokens"), std::string::npos) << msg;
    expect_good_error(msg, path);
  }
}

TEST_F(DataTest, LlmcTruncatedHeader) {
  const std::string full = llmc_file(1, 4, {1, 2, 3, 4});
  for (size_t len : {4u, 8u, 12u, 100u, 1022u, 1023u}) {
    auto path = write("cut.bin", full.substr(0, len));
    for (Format f : {Format::Auto, Format::LlmC}) {
      std::string msg = error_of([&] { TokenDataset::load(path, f); });
      const std::string len_s = len >= 1000 ? "1,0" + std::to_string(len - 1000) : std::to_string(len);
      EXPECT_NE(msg.find("has a truncated header: the file is " + len_s + " bytes, shorter than the 1,024-byte header"),
                std::string::npos)
          << msg;
      EXPECT_NE(msg.find("--data-format u16"), std::string::npos) << msg;
      expect_good_error(msg, path);
    }
    // Forced raw uint16, the same bytes load (the magic is read as two tokens).
    if (len % 2 == 0) {
      TokenDataset d = TokenDataset::load(path, Format::U16);
      EXPECT_EQ(d.size(), len / 2);
      EXPECT_EQ(d[0] | (d[1] << 16), 20240520u);
    }
  }
}

TEST_F(DataTest, AccountedAndMovable) {
  auto& A = remat::Allocator::global();
  const size_t before = A.active(remat::Category::Data);
  {
    TokenDataset d = iota_dataset(1000);  // widened to uint32: 4 bytes per token
    EXPECT_EQ(A.active(remat::Category::Data), before + 4000);
    EXPECT_EQ(d.buffer_bytes(), 4000u);
    TokenDataset moved = std::move(d);
    EXPECT_EQ(d.size(), 0u);
    EXPECT_EQ(d.max_token(), -1);
    EXPECT_EQ(d.format(), Format::Auto);
    EXPECT_EQ(moved.size(), 1000u);
    EXPECT_EQ(A.active(remat::Category::Data), before + 4000);
    TokenDataset other = iota_dataset(10);
    other = std::move(moved);
    EXPECT_EQ(other[999], 999u);
    EXPECT_EQ(A.active(remat::Category::Data), before + 4000);
  }
  EXPECT_EQ(A.active(remat::Category::Data), before);
  std::vector<uint32_t> wide = {1, 70000, 3};
  TokenDataset w = TokenDataset::from_tokens(wide, "wide", false);
  EXPECT_EQ(w.to_vector(), wide);
  EXPECT_EQ(w.max_token(), 70000);
  EXPECT_EQ(w.format(), Format::Auto);
  EXPECT_EQ(A.active(remat::Category::Data), before + 12);
}

TEST(DataVocab, CheckVocab) {
  TokenDataset d = iota_dataset(1000);
  EXPECT_NO_THROW(d.check_vocab(1000));
  std::string msg = error_of([&] { d.check_vocab(999); });
  EXPECT_EQ(msg,
            "[data] the data holds token 999 but the vocabulary is 999 (iota) (hint: use --vocab 1000 or more, or "
            "data tokenised for a vocabulary of 999)");
  TokenDataset empty;
  EXPECT_EQ(empty.max_token(), -1);
  EXPECT_NO_THROW(empty.check_vocab(1));
}

// split() views the mapping: no copy, no allocation, and a part outlives the original.
TEST_F(DataTest, SplitViewsShareTheMapping) {
  auto& A = remat::Allocator::global();
  const size_t data_before = A.active(remat::Category::Data);
  const size_t mapped_before = TokenDataset::live_mapped_bytes();
  std::vector<uint16_t> raw(1000);
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = uint16_t(i * 7);
  std::vector<uint32_t> wide(1000);
  for (size_t i = 0; i < wide.size(); ++i) wide[i] = uint32_t(100000 + i);
  auto raw_path = write("train.bin", bytes_of(raw));
  auto v1_path = write("v1.bin", llmc_file(1, 1000, raw));
  auto v2_path = write("v2.bin", llmc_file32(1000, wide));
  const size_t file_bytes = 2000 + (1024 + 2000) + (1024 + 4000);
  TokenDataset keep_val;
  {
    TokenDataset r = TokenDataset::load(raw_path), a = TokenDataset::load(v1_path), b = TokenDataset::load(v2_path);
    EXPECT_EQ(TokenDataset::live_mapped_bytes(), mapped_before + file_bytes);
    EXPECT_EQ(A.active(remat::Category::Data), data_before);  // mapped pages are not heap
    {
      auto [tr, va] = r.split(0.1, 16);
      EXPECT_EQ(tr.tokens_u16().data(), r.tokens_u16().data());
      EXPECT_EQ(va.tokens_u16().data(), r.tokens_u16().data() + 900);
      EXPECT_EQ(va.mapped_bytes(), 2000u);
      EXPECT_EQ(va.format(), Format::U16);
      EXPECT_EQ(va[0], uint32_t(uint16_t(900 * 7)));
      auto [tr1, va1] = a.split(0.1, 16);
      EXPECT_EQ(tr1.tokens_u16().data(), a.tokens_u16().data());
      EXPECT_EQ(va1.tokens_u16().data(), a.tokens_u16().data() + 900);
      auto [tr2, va2] = b.split(0.1, 16);
      EXPECT_EQ(tr2.tokens().data(), b.tokens().data());
      EXPECT_EQ(va2.tokens().data(), b.tokens().data() + 900);
      EXPECT_EQ(va2.max_token(), 100999);
      EXPECT_EQ(tr2.max_token(), 100899);
      EXPECT_EQ(A.active(remat::Category::Data), data_before);
      EXPECT_EQ(TokenDataset::live_mapped_bytes(), mapped_before + file_bytes);
      keep_val = std::move(va2);
    }
  }
  // The originals are gone; the v2 mapping lives on in keep_val, the others are unmapped.
  EXPECT_EQ(TokenDataset::live_mapped_bytes(), mapped_before + 1024 + 4000);
  EXPECT_EQ(keep_val.size(), 100u);
  EXPECT_EQ(keep_val[0], 100900u);
  EXPECT_EQ(keep_val[99], 100999u);
  keep_val = TokenDataset();
  EXPECT_EQ(TokenDataset::live_mapped_bytes(), mapped_before);
  // Accounted buffers are shared the same way.
  TokenDataset d = iota_dataset(1000);
  const size_t with_d = A.active(remat::Category::Data);
  auto [tr, va] = d.split(0.1, 16);
  EXPECT_EQ(tr.tokens().data(), d.tokens().data());
  EXPECT_EQ(va.tokens().data(), d.tokens().data() + 900);
  EXPECT_EQ(A.active(remat::Category::Data), with_d);
  d = TokenDataset();
  EXPECT_EQ(A.active(remat::Category::Data), with_d);  // the parts still hold the buffer
  EXPECT_EQ(va[99], 999u);
}

// The sampler gives the same windows whatever the storage: uint32 buffer, raw uint16 mapping,
// llm.c v1 and v2 mappings.
TEST_F(DataTest, SamplerReadsEveryStorage) {
  std::vector<uint16_t> t16(3000);
  for (size_t i = 0; i < t16.size(); ++i) t16[i] = uint16_t(i);
  std::vector<uint32_t> t32(t16.begin(), t16.end());
  TokenDataset ref = TokenDataset::from_tokens(t16, "iota", false);
  TokenDataset raw = TokenDataset::load(write("raw.bin", bytes_of(t16)));
  TokenDataset v1 = TokenDataset::load(write("v1.bin", llmc_file(1, 3000, t16)));
  TokenDataset v2 = TokenDataset::load(write("v2.bin", llmc_file32(3000, t32)));
  const int64_t B = 3, T = 24;
  std::vector<int32_t> in0(B * T), tg0(B * T), in(B * T), tg(B * T);
  BatchSampler s0(ref, B, T, 42);
  for (const TokenDataset* d : {&raw, &v1, &v2}) {
    BatchSampler s(*d, B, T, 42);
    for (uint64_t step : {0ull, 1ull, 17ull}) {
      s0.sample(step, in0.data(), tg0.data());
      s.sample(step, in.data(), tg.data());
      EXPECT_EQ(in, in0);
      EXPECT_EQ(tg, tg0);
      s0.sequential(step, in0.data(), tg0.data());
      s.sequential(step, in.data(), tg.data());
      EXPECT_EQ(in, in0);
      EXPECT_EQ(tg, tg0);
    }
  }
}

// A sparse 1 TiB token file maps without reading it (and so without copying it); under an address
// space limit smaller than the file, the mapping fails with a clear error.
TEST_F(DataTest, HugeSparseFileAndAddressSpace) {
  const std::string path = p("huge.bin");
  const uint64_t size = uint64_t(1) << 40;
  {
    std::ofstream(path, std::ios::binary) << "";
    std::error_code ec;
    fs::resize_file(path, size, ec);
    if (ec) GTEST_SKIP() << "cannot create a sparse 1 TiB file here: " << ec.message();
  }
  {
    TokenDataset d = TokenDataset::load(path);
    EXPECT_EQ(d.size(), size / 2);
    EXPECT_EQ(d.mapped_bytes(), size);
    EXPECT_EQ(d[0], 0u);
    EXPECT_EQ(d[d.size() - 1], 0u);
    EXPECT_EQ(d.description(), "raw uint16 token file '" + path + "' (549,755,813,888 tokens)");
  }
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_AS, &old), 0);
  const rlim_t cap = rlim_t(64) << 30;  // 64 GiB of address space: plenty for the test, not for the file
  if (old.rlim_max != RLIM_INFINITY && old.rlim_max < cap) GTEST_SKIP() << "RLIMIT_AS hard limit is low";
  rlimit low = old;
  low.rlim_cur = cap;
  ASSERT_EQ(setrlimit(RLIMIT_AS, &low), 0);
  std::string msg = error_of([&] { TokenDataset::load(path); });
  ASSERT_EQ(setrlimit(RLIMIT_AS, &old), 0);
  EXPECT_NE(msg.find("cannot map token file '" + path + "' (1,099,511,627,776 bytes)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("address space"), std::string::npos) << msg;
  expect_good_error(msg, path);
}

// Beyond what a 64-bit process can map at all (only where the file system allows such a size).
TEST_F(DataTest, FileBeyondTheAddressSpace) {
  // ext4 caps files at 16 TiB; tmpfs (/dev/shm) takes a sparse file of any size.
  std::string path;
  for (const std::string& candidate : {p("huge.bin"), "/dev/shm/remat_test_huge_" + std::to_string(getpid()) + ".bin"}) {
    std::error_code ec;
    if (!std::ofstream(candidate, std::ios::binary)) continue;
    fs::resize_file(candidate, (uint64_t(1) << 47) + 2, ec);
    if (!ec) {
      path = candidate;
      break;
    }
    fs::remove(candidate, ec);
  }
  if (path.empty()) GTEST_SKIP() << "no file system here takes a sparse 128 TiB file";
  std::string msg = error_of([&] { TokenDataset::load(path); });
  std::error_code ec;
  fs::remove(path, ec);
  EXPECT_NE(msg.find("is 140,737,488,355,330 bytes, more than the 140,737,488,355,328-byte address space"),
            std::string::npos)
      << msg;
  expect_good_error(msg, path);
}

// Seeded, bounded fuzzing of llm.c headers and file sizes: never a crash; every file accepted is
// consistent with its size and its bytes.
TEST_F(DataTest, FuzzLlmcHeaders) {
  std::mt19937_64 rng(20240520);
  auto pick = [&](uint64_t n) { return uint64_t(rng() % n); };
  const char* suffixes[] = {".bin", ".BIN", "", ".txt"};
  const Format formats[] = {Format::Auto, Format::Auto, Format::LlmC, Format::U16, Format::Text};
  int accepted_llmc = 0, rejected = 0, accepted = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<int32_t> header(256, 0);
    for (size_t i = 3; i < 256; ++i)
      if (pick(8) == 0) header[i] = int32_t(rng());
    header[0] = pick(10) ? 20240520 : (pick(2) ? int32_t(rng()) : 20240520 ^ (1 << pick(31)));
    const int32_t versions[] = {1, 2, 1, 2, 0, 3, -1, 20240520, int32_t(rng())};
    header[1] = versions[pick(9)];
    const int width = header[1] == 2 ? 4 : 2;
    const int64_t n = int64_t(pick(200));
    const int32_t counts[] = {int32_t(n), int32_t(n), int32_t(n), int32_t(n), int32_t(n + 1), int32_t(n - 1),
                              int32_t(2 * n), 0, -1, std::numeric_limits<int32_t>::min(),
                              std::numeric_limits<int32_t>::max(), int32_t(rng())};
    header[2] = counts[pick(12)];
    std::string payload(size_t(n * width), '\0');
    for (char& c : payload) c = char(rng());
    if (pick(4) == 0) payload.resize(size_t(pick(400)));  // a payload of the wrong size
    std::string bytes = bytes_of(header) + payload;
    if (pick(5) == 0) bytes.resize(size_t(pick(bytes.size() + 1)));  // truncated anywhere
    if (pick(10) == 0) bytes[pick(bytes.size() + 1) % std::max<size_t>(bytes.size(), 1)] ^= char(1 << pick(8));
    if (bytes.empty() && pick(2)) bytes = "x";
    // A fresh name each time (ext4 flushes a file rewritten in place, which would make this slow).
    const std::string path = write("f" + std::to_string(iter) + suffixes[pick(4)], bytes);
    struct Remove {
      std::string path;
      ~Remove() { std::remove(path.c_str()); }
    } remove_after{path};
    const Format f = formats[pick(5)];
    SCOPED_TRACE("iteration " + std::to_string(iter) + ", " + std::to_string(bytes.size()) + " bytes, format " +
                 remat::data::format_name(f));
    try {
      TokenDataset d = TokenDataset::load(path, f);
      ++accepted;
      ASSERT_GT(d.size(), 0u);
      const auto* u = reinterpret_cast<const unsigned char*>(bytes.data());
      size_t offset = 0;
      if (d.format() == Format::LlmC) {
        ++accepted_llmc;
        int32_t h[3];
        std::memcpy(h, u, sizeof h);
        ASSERT_EQ(h[0], 20240520);
        ASSERT_TRUE(h[1] == 1 || h[1] == 2);
        ASSERT_EQ(d.width(), h[1] == 1 ? 2 : 4);
        ASSERT_EQ(uint64_t(h[2]), d.size());
        ASSERT_EQ(1024 + d.size() * size_t(d.width()), bytes.size());  // count * width + header == size
        offset = 1024;
      } else if (d.format() == Format::U16) {
        ASSERT_EQ(d.size() * 2, bytes.size());
      } else {
        ASSERT_EQ(d.format(), Format::Text);
        ASSERT_EQ(d.size(), bytes.size());
      }
      if (f != Format::Auto) {
        ASSERT_EQ(d.format(), f);
      }
      int64_t mx = -1;
      for (size_t i = 0; i < d.size(); ++i) {
        uint32_t want = 0;
        if (d.format() == Format::Text) {
          want = u[i];
        } else if (d.width() == 2) {
          uint16_t v;
          std::memcpy(&v, u + offset + 2 * i, 2);
          want = v;
        } else {
          std::memcpy(&want, u + offset + 4 * i, 4);
        }
        ASSERT_EQ(d[i], want) << i;
        mx = std::max<int64_t>(mx, want);
      }
      ASSERT_EQ(d.max_token(), mx);
      if (d.size() >= 2) {
        BatchSampler s(d, 2, 1, uint64_t(iter));
        int32_t in[2], tg[2];
        s.sample(uint64_t(iter), in, tg);
        for (int b = 0; b < 2; ++b) ASSERT_EQ(uint32_t(in[b]), d[s.window_start(uint64_t(iter), b)]);
      }
    } catch (const remat::Error& e) {
      ++rejected;
      const std::string msg = e.what();
      ASSERT_EQ(msg.find('\n'), std::string::npos) << msg;
      ASSERT_NE(msg.find("'" + path + "'"), std::string::npos) << msg;
      ASSERT_NE(msg.find("(hint: "), std::string::npos) << msg;
    }
  }
  // The mutations reach both outcomes, and llm.c files are among the accepted.
  EXPECT_GT(accepted_llmc, 100);
  EXPECT_GT(rejected, 300);
  EXPECT_GT(accepted, 500);
}

TEST(DataBuiltin, CorpusIsEmbedded) {
  TokenDataset d = TokenDataset::builtin();
  EXPECT_GT(d.size(), 100000u);
  EXPECT_EQ(d.size(), 199994u);
  EXPECT_TRUE(d.byte_level());
  EXPECT_EQ(d.max_token(), 122);
  EXPECT_EQ(d.format(), remat::data::Format::Text);
  EXPECT_EQ(d.width(), 4);
  EXPECT_FALSE(d.mapped());  // 'z': the excerpt is plain ASCII
  EXPECT_EQ(d.description(), "built-in corpus (shakespeare excerpt, 199,994 tokens)");
  std::string text = remat::data::builtin_corpus_text();
  EXPECT_EQ(text.substr(0, 14), "First Citizen:");
  EXPECT_EQ(text.back(), '\n');
  for (size_t i = 0; i < text.size(); i += 997) ASSERT_EQ(d[i], uint32_t((unsigned char)text[i]));
  EXPECT_EQ(TokenDataset::load("").size(), d.size());
  // The generated builtin_corpus.cpp matches the excerpt checked into the repo...
  fs::path excerpt = fs::path(__FILE__).parent_path() / "../../src/data/corpus/shakespeare_excerpt.txt";
  if (fs::exists(excerpt)) {
    EXPECT_EQ(text, read_text(excerpt.string()));
  }
  // ...and the excerpt is the head of tinyshakespeare.
  fs::path full = fs::path(REMAT_SHARED_DIR) / "data/tinyshakespeare.txt";
  if (!fs::exists(full)) REMAT_SKIP_WITHOUT("../shared/data/tinyshakespeare.txt is absent: prefix check skipped");
  EXPECT_EQ(read_text(full.string()).substr(0, text.size()), text);
}

TEST(DataSplit, SizesAndContents) {
  TokenDataset d = iota_dataset(1000);
  auto [train, val] = d.split(0.1, 16);
  EXPECT_EQ(train.size(), 900u);
  EXPECT_EQ(val.size(), 100u);
  EXPECT_EQ(train[0], 0u);
  EXPECT_EQ(train[899], 899u);
  EXPECT_EQ(val[0], 900u);
  EXPECT_EQ(val[99], 999u);
  EXPECT_NE(val.description().find("val split (100 tokens)"), std::string::npos) << val.description();
  auto [t2, v2] = d.split(0.0169, 16);  // round(16.9) = 17 = T + 1: just enough
  EXPECT_EQ(v2.size(), 17u);
  std::string msg = error_of([&] { d.split(0.01, 16); });
  EXPECT_NE(msg.find("leaves 10 validation tokens, fewer than one window of T + 1 = 17"), std::string::npos) << msg;
  // The hints name the flags that fix it: more validation, or less.
  EXPECT_NE(msg.find("a larger --val-fraction, --val-data FILE"), std::string::npos) << msg;
  msg = error_of([&] { d.split(0.99, 16); });
  EXPECT_NE(msg.find("training tokens"), std::string::npos) << msg;
  EXPECT_NE(msg.find("a smaller --val-fraction"), std::string::npos) << msg;
  msg = error_of([&] { d.split(1.5, 16); });
  EXPECT_NE(msg.find("not between 0 and 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--val-fraction 0.1"), std::string::npos) << msg;
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
