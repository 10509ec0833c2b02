// Exactness of remat's byte-level BPE with LLaMA 3's pre-tokenizer (Grattafiori et al. 2024) against
// tiktoken's cl100k_base, whose pattern LLaMA 3 took, as the npm package js-tiktoken ships it and
// run with node. llama3_reference.js writes cl100k_base as a tokenizer.json laid out as LLaMA 3's is
// (Split on the pattern, ByteLevel, ignore_merges, special tokens added), which remat reads; then
// both encode the built-in corpus, a hostile text and 10,000 random strings, and the ids must be
// identical. Skips, naming what to install, when node or the package is missing.
#include <gtest/gtest.h>

#include <omp.h>
#include <unistd.h>

#include <cstring>

#include "test_util.h"
#include "reference_tools.h"
#include "tokenizer/token_file.h"
#include "tokenizer/tokenizer.h"

using namespace remat_tok_test;
using remat::tok::load_tokenizer;
using remat::tok::Tokenizer;

namespace {

class Llama3Reference : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string why;
    dir_ = npm_reference("js-tiktoken@1.0.21", "js-tiktoken/dist/ranks/cl100k_base.cjs", why);
    if (dir_.empty()) {
      why_ = "LLaMA 3 reference unavailable: " + why;
      return;
    }
    // One build of the tokenizer.json for every test binary that runs at once (flock).
    const fs::path json = dir_ / "llama3-tokenizer.json";
    const Ran r = run("cd '" + dir_.string() + "' && flock build.lock sh -c \"test -f '" + json.string() + "' || node '" +
                      script() + "' build '" + dir_.string() + "' '" + json.string() + "'\"");
    if (r.status != 0) {
      why_ = "could not write the reference tokenizer.json: " + r.out.substr(0, 300);
      return;
    }
    tok_ = load_tokenizer(json.string()).release();
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }
  void SetUp() override {
    if (!why_.empty()) {
      if (why_.starts_with("LLaMA 3 reference unavailable")) REMAT_SKIP_WITHOUT(why_);
      FAIL() << why_;
    }
  }
  static std::string script() { return (source_dir() / "llama3_reference.js").string(); }
  void expect_same(const std::vector<std::string>& texts) {
    const std::string tag = ::testing::UnitTest::GetInstance()->current_test_info()->name() + std::string(".") +
                            std::to_string(getpid());
    std::string error;
    const auto want = node_ids("'" + script() + "' encode '" + dir_.string() + "'", dir_, tag, texts, error);
    ASSERT_EQ(want.size(), texts.size()) << error;
    std::vector<std::string> report;
    EXPECT_EQ(compare_ids(*tok_, texts, want, &report), 0);
    for (const auto& r : report) ADD_FAILURE() << r;
  }
  static inline fs::path dir_;
  static inline std::string why_;
  static inline Tokenizer* tok_ = nullptr;
};

}  // namespace

TEST_F(Llama3Reference, VocabularyAndSpecialTokens) {
  EXPECT_EQ(tok_->vocab_size(), 100277);  // 100,256 ranks, then special tokens up to <|endofprompt|>
  EXPECT_EQ(tok_->encode("<|endoftext|>"), std::vector<int32_t>{100257});
  EXPECT_EQ(tok_->decode(std::vector<int32_t>{100257}), "<|endoftext|>");
  EXPECT_NE(tok_->name().find("100,277 tokens"), std::string::npos) << tok_->name();
}

// The corpus as one text: LLaMA 3's pattern joins newlines into one piece, so cutting it between
// them would change the pieces.
TEST_F(Llama3Reference, BuiltinCorpus) { expect_same({corpus_text()}); }

TEST_F(Llama3Reference, HostileText) { expect_same({hostile_text()}); }

// Contractions in every case (and 'ſ, U+017F, which folds to 's), digits in runs of every length,
// punctuation before newlines: the alternatives where LLaMA 3's pattern differs from GPT-2's.
TEST_F(Llama3Reference, WhereThePatternDiffersFromGpt2s) {
  expect_same({"IT'S WE'RE You'Ve I'M we'LL He'D it'\u017F 'x", "1 12 123 1234 12345 123456 1234567", "end.\r\n\n x!!\n\n  y",
               "a  \n  b\t\tc \u3000 d", "(word)\tgoes,\"quoted\"", "\u0663\u0664\u0665\u0666 \u2160\u2161\u2162\u2163"});
}

TEST_F(Llama3Reference, TenThousandRandomStrings) { expect_same(random_texts(10000)); }

TEST_F(Llama3Reference, InvalidUtf8RoundTrips) {
  EXPECT_TRUE(invalid_utf8_not_round_tripped(*tok_, hostile_text()).empty());
}

// `remat tokenize`'s chunks are cut only where LLaMA 3's pattern makes no piece across the cut: the
// corpus's ".\n" is one cl100k_base token, so a cut after punctuation would change the ids.
TEST_F(Llama3Reference, ChunkedTokenFilesHoldTheWholeTextsIds) {
  const fs::path dir = dir_ / ("chunked." + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string text = corpus_text().substr(0, 40000) + hostile_text();
  std::ofstream(dir / "a.txt", std::ios::binary) << text;
  std::vector<int32_t> want = {100257};  // the document start: cl100k_base's <|endoftext|>
  tok_->encode(text, want);
  for (size_t chunk : {size_t(7), size_t(100), size_t(4096)})
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      remat::tok::TokenizeOptions opt;
      opt.chunk_bytes = chunk;
      const std::string out = (dir / "out.bin").string();
      remat::tok::tokenize_files(*tok_, {(dir / "a.txt").string()}, out, "", opt);
      const std::string b = slurp(out);
      ASSERT_EQ(b.size(), 1024 + 4 * want.size()) << "chunk " << chunk;  // version 2: 100,277 ids
      std::vector<int32_t> got(want.size());
      std::memcpy(got.data(), b.data() + 1024, 4 * got.size());
      EXPECT_EQ(got, want) << "chunk " << chunk << ", " << threads << " threads";
    }
  fs::remove_all(dir);
}
