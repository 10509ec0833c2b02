// SentencePiece through libsentencepiece (tokenizer/sentencepiece.cpp) against Debian's
// python3-sentencepiece on a small model trained with it (LLaMA 2's settings): the same ids and the
// same decoded text on the built-in corpus, a hostile text and 10,000 random strings. Skips, naming
// the package, when python3 or its sentencepiece module is missing.
#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "core/error.h"
#include "reference_tools.h"
#include "tokenizer/token_file.h"
#include "tokenizer/tokenizer.h"

using namespace remat_tok_test;
using remat::tok::load_tokenizer;
using remat::tok::Tokenizer;

namespace {

// A python3 with the sentencepiece module ("" when none): the one on PATH, else Debian's.
std::string python_with_sentencepiece() {
  for (std::string py : {"python3", "/usr/bin/python3"})
    if (run(py + " -c 'import sentencepiece'").status == 0) return py;
  return "";
}

class SentencePieceReference : public ::testing::Test {
 protected:
  void SetUp() override {
    py_ = python_with_sentencepiece();
    if (py_.empty())
      REMAT_SKIP_WITHOUT("SentencePiece reference unavailable: no python3 with the sentencepiece module "
                         "(Debian: apt-get install python3-sentencepiece)");
    dir_ = fs::path(REMAT_BINARY).parent_path() / "spm-ref";
    fs::create_directories(dir_);
    const fs::path model = dir_ / "m.model";
    if (!fs::exists(model)) {
      std::ofstream(dir_ / "corpus.txt", std::ios::binary) << corpus_text() << hostile_text();
      // ctest runs these tests in parallel: one trains (flock), the others then find the model.
      const Ran r = run("cd '" + dir_.string() + "' && flock train.lock sh -c '[ -f m.model ] || " + py_ + " '\\''" +
                        (source_dir() / "sentencepiece_reference.py").string() + "'\\'' train corpus.txt m'");
      ASSERT_EQ(r.status, 0) << r.out;
    }
    tok_ = load_tokenizer(model.string());
  }
  void expect_same(const std::vector<std::string>& texts, bool round_trip) {
    const std::string tag = ::testing::UnitTest::GetInstance()->current_test_info()->name() + std::string(".") +
                            std::to_string(getpid());
    const fs::path in = dir_ / (tag + ".texts.json"), out = dir_ / (tag + ".ids.json");
    std::ofstream(in) << nlohmann::json(texts).dump();
    const Ran r = run(py_ + " '" + (source_dir() / "sentencepiece_reference.py").string() + "' encode '" +
                      (dir_ / "m.model").string() + "' '" + in.string() + "' '" + out.string() + "'");
    ASSERT_EQ(r.status, 0) << r.out;
    const auto want = nlohmann::json::parse(slurp(out));
    fs::remove(in);
    fs::remove(out);
    ASSERT_EQ(want.size(), texts.size());
    int shown = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      const std::vector<int32_t> got = tok_->encode(texts[i]);
      const auto ids = want[i]["ids"].get<std::vector<int32_t>>();
      if (got != ids && shown++ < 5)
        ADD_FAILURE() << "text " << i << " " << nlohmann::json(texts[i]).dump() << ": remat "
                      << nlohmann::json(got).dump().substr(0, 300) << " vs the reference's "
                      << nlohmann::json(ids).dump().substr(0, 300);
      const std::string text = tok_->decode(got);
      EXPECT_EQ(text, want[i]["text"].get<std::string>()) << "text " << i;
      // With identity normalization and byte fallback, SentencePiece gives the text back except
      // for leading spaces, which the dummy prefix's removal on decoding eats one of.
      if (round_trip && !texts[i].starts_with(" ")) EXPECT_EQ(text, texts[i]) << "text " << i;
    }
  }
  std::string py_;
  fs::path dir_;
  std::unique_ptr<Tokenizer> tok_;
};

}  // namespace

TEST_F(SentencePieceReference, Vocabulary) {
  EXPECT_EQ(tok_->vocab_size(), 800);
  EXPECT_TRUE(tok_->document_start().has_value());  // <s>
  EXPECT_THROW(tok_->decode(std::vector<int32_t>{800}), remat::Error);
}

TEST_F(SentencePieceReference, BuiltinCorpus) { expect_same({corpus_text()}, true); }

TEST_F(SentencePieceReference, HostileText) { expect_same({hostile_text()}, true); }

TEST_F(SentencePieceReference, TenThousandRandomStrings) { expect_same(random_texts(10000), true); }

// With LLaMA 2's settings (a dummy prefix, pieces split at white space), text is cut into chunks at
// a single space between ASCII letters or digits, which the next chunk's dummy prefix stands for:
// the chunks' ids are the whole text's, at any chunk size and thread count.
TEST_F(SentencePieceReference, ChunksGiveTheWholeTextsIds) {
  const std::string text = corpus_text().substr(0, 60000);
  std::vector<int32_t> want;
  if (tok_->document_start()) want.push_back(*tok_->document_start());
  tok_->encode(text, want);
  size_t next = 0;
  EXPECT_EQ(tok_->cut("ab cd", 0, &next), 2u);
  EXPECT_EQ(next, 3u);  // the space is skipped
  EXPECT_EQ(tok_->cut("ab. cd  ef\nx", 0, &next), std::string_view::npos);
  for (size_t chunk : {size_t(1), size_t(100), size_t(4096)})
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      EXPECT_EQ(remat::tok::encode_document(*tok_, text, chunk), want) << "chunk " << chunk << ", " << threads << " threads";
    }
}
