// The pre-tokenizers of GPT-2 and LLaMA 3, written by hand (tokenizer/pretokenize.h): the pieces
// their patterns make, worked out by hand from each pattern's alternatives, and the Unicode class
// table. tests/tokenizer/test_llama3_reference.cpp compares LLaMA 3's with a regex engine too.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenizer/pretokenize.h"
#include "tokenizer/unicode_classes.h"

using namespace remat::tok;

namespace {
std::vector<std::string> pieces(std::string_view s) {
  std::vector<std::string> out;
  for (auto p : gpt2_pieces(s)) out.emplace_back(p);
  return out;
}
std::vector<std::string> l3(std::string_view s) {
  std::vector<std::string> out;
  for (auto p : pieces(Pretokenizer::Llama3, s)) out.emplace_back(p);
  return out;
}
using V = std::vector<std::string>;
}  // namespace

TEST(Pretokenize, WordsKeepTheirLeadingSpace) {
  EXPECT_EQ(pieces("Hello world, it's 2024!"), (V{"Hello", " world", ",", " it", "'s", " 2024", "!"}));
}

TEST(Pretokenize, Contractions) {
  EXPECT_EQ(pieces("we'll they're I've you'd 'm 't"),
            (V{"we", "'ll", " they", "'re", " I", "'ve", " you", "'d", " '", "m", " '", "t"}));
  // The pattern is case-sensitive: 'S is not a contraction.
  EXPECT_EQ(pieces("IT'S"), (V{"IT", "'", "S"}));
}

TEST(Pretokenize, WhitespaceRunsLeaveTheirLastSpaceToTheNextWord) {
  EXPECT_EQ(pieces("a   b"), (V{"a", "  ", " b"}));
  EXPECT_EQ(pieces("a\n\nb"), (V{"a", "\n", "\n", "b"}));
  EXPECT_EQ(pieces("a \n b"), (V{"a", " \n", " b"}));
  EXPECT_EQ(pieces("end   "), (V{"end", "   "}));
  EXPECT_EQ(pieces(" "), (V{" "}));
  EXPECT_EQ(pieces("  !"), (V{" ", " !"}));
  EXPECT_EQ(pieces("\t1"), (V{"\t", "1"}));
}

TEST(Pretokenize, ClassesAreUnicode) {
  // Letters (Greek, CJK, a combining-free accented letter), numbers (Arabic-Indic digits, Roman
  // numeral U+2160), other (emoji), and a no-break space (White_Space).
  EXPECT_EQ(pieces("αβγ 日本 é"), (V{"αβγ", " 日本", " é"}));
  EXPECT_EQ(pieces("x٣٤ Ⅰ"), (V{"x", "٣٤", " Ⅰ"}));
  EXPECT_EQ(pieces("hi 😀😀!"), (V{"hi", " 😀😀!"}));
  EXPECT_EQ(pieces("a\u00a0b"), (V{"a", "\u00a0", "b"}));
  // A combining mark (Mn) is not a letter: it starts an "other" run.
  EXPECT_EQ(pieces("e\u0301t"), (V{"e", "\u0301", "t"}));
}

TEST(Pretokenize, InvalidUtf8IsOtherAndNoByteIsLost) {
  const std::string s = "ab\xff\xfe cd\xc3 \xe2\x82";
  EXPECT_EQ(pieces(s), (V{"ab", "\xff\xfe", " cd", "\xc3", " \xe2\x82"}));
  std::string joined;
  for (auto& p : pieces(s)) joined += p;
  EXPECT_EQ(joined, s);
}

TEST(PretokenizeLlama3, ContractionsFoldCase) {
  // (?i:...): 'S, 'RE, 'Ll are contractions; so is 'ſ (U+017F folds to s); 'x is not.
  EXPECT_EQ(l3("IT'S WE'RE we'Ll it'\u017F x'x"),
            (V{"IT", "'S", " WE", "'RE", " we", "'Ll", " it", "'\u017F", " x", "'x"}));
}

TEST(PretokenizeLlama3, ALetterRunTakesOneNonLetterBeforeIt) {
  // [^\r\n\p{L}\p{N}]?\p{L}+: a space, a tab or punctuation joins the word; a newline or digit does not.
  EXPECT_EQ(l3("Hello world,(it)\tgoes\nnow"), (V{"Hello", " world", ",(", "it", ")", "\tgoes", "\n", "now"}));
  EXPECT_EQ(l3("(word 7x"), (V{"(word", " ", "7", "x"}));
}

TEST(PretokenizeLlama3, NumbersGoInThrees) {
  EXPECT_EQ(l3("1234567 x12"), (V{"123", "456", "7", " x", "12"}));
  EXPECT_EQ(l3("\u0663\u0664\u0665\u0666"), (V{"\u0663\u0664\u0665", "\u0666"}));
}

TEST(PretokenizeLlama3, PunctuationKeepsTheNewlinesAfterIt) {
  // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
  EXPECT_EQ(l3("end.\r\n\nNext !!\n x"), (V{"end", ".\r\n\n", "Next", " !!\n", " x"}));
}

TEST(PretokenizeLlama3, WhiteSpaceEndsAtItsLastNewline) {
  // `\s*[\r\n]+`, then `\s+(?!\S)` and `\s+`.
  EXPECT_EQ(l3("a  \n  b"), (V{"a", "  \n", " ", " b"}));
  EXPECT_EQ(l3("a\n\n\nb"), (V{"a", "\n\n\n", "b"}));
  EXPECT_EQ(l3("a   b"), (V{"a", "  ", " b"}));
  EXPECT_EQ(l3("a\t1"), (V{"a", "\t", "1"}));
  EXPECT_EQ(l3("end   "), (V{"end", "   "}));
  std::string bad = "ab\xff\xfe cd\xc3\n";
  std::string joined;
  for (auto& p : l3(bad)) joined += p;
  EXPECT_EQ(joined, bad);
  EXPECT_EQ(l3(bad), (V{"ab", "\xff\xfe", " cd", "\xc3\n"}));
}

TEST(UnicodeClasses, TableIsSortedAndSpotChecks) {
  for (size_t i = 1; i < kNumUnicodeRanges; ++i) EXPECT_LT(kUnicodeRanges[i - 1].hi, kUnicodeRanges[i].lo);
  EXPECT_EQ(char_class('a'), CharClass::Letter);
  EXPECT_EQ(char_class(0x4E00), CharClass::Letter);   // CJK (a First/Last range in UnicodeData.txt)
  EXPECT_EQ(char_class(0xAC00), CharClass::Letter);   // Hangul syllable (a range too)
  EXPECT_EQ(char_class(0x0663), CharClass::Number);   // Arabic-Indic digit three
  EXPECT_EQ(char_class(0x2160), CharClass::Number);   // Roman numeral one (Nl)
  EXPECT_EQ(char_class(0x3000), CharClass::Space);    // ideographic space
  EXPECT_EQ(char_class(0x0085), CharClass::Space);    // next line (White_Space)
  EXPECT_EQ(char_class(0xFEFF), CharClass::Other);    // BOM: not White_Space
  EXPECT_EQ(char_class(0x1F600), CharClass::Other);   // emoji
  EXPECT_EQ(char_class(0x0301), CharClass::Other);    // combining acute
  EXPECT_EQ(char_class(0x10FFFF), CharClass::Other);
}

TEST(Utf8, DecodingRejectsEveryKindOfInvalidSequence) {
  EXPECT_TRUE(valid_utf8("h\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"));
  for (std::string bad : {"\x80", "\xc3", "\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xf8\x88\x80\x80\x80",
                          "\xe2\x28\xa1"})
    EXPECT_FALSE(valid_utf8(bad)) << bad;
}
