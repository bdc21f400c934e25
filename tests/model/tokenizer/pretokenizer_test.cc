// Expected pieces were produced by HF `tokenizers` (ByteLevel(use_regex=True), Digits(
// individual_digits=True), and Split(<Llama 3 regex>, "isolated")) during development; the
// matchers must agree with them exactly.
#include "model/tokenizer/pretokenizer.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tandem {
namespace {

std::vector<std::string> Pieces(PreTokenizerKind kind, const std::string& text) {
  std::vector<std::string> out;
  for (const absl::string_view p : PreTokenize(kind, text)) out.emplace_back(p);
  return out;
}

using V = std::vector<std::string>;

TEST(PreTokenizerTest, Gpt2) {
  const auto k = PreTokenizerKind::kGpt2;
  EXPECT_EQ(Pieces(k, "Hello  world\n\n  it's 'x  "),
            (V{"Hello", " ", " world", "\n\n ", " it", "'s", " '", "x", "  "}));
  EXPECT_EQ(Pieces(k, "a\nb  c\t\td  "), (V{"a", "\n", "b", " ", " c", "\t", "\t", "d", "  "}));
  EXPECT_EQ(Pieces(k, "x  \n y"), (V{"x", "  \n", " y"}));
  EXPECT_EQ(Pieces(k, " 123abc'S"), (V{" 123", "abc", "'", "S"}));
  EXPECT_EQ(Pieces(k, "¡¿Qué?!"), (V{"¡¿", "Qué", "?!"}));
  EXPECT_EQ(Pieces(k, ""), V{});
}

TEST(PreTokenizerTest, DigitsThenGpt2) {
  const auto k = PreTokenizerKind::kDigitsGpt2;
  EXPECT_EQ(Pieces(k, "a٣b²c12 x⅓"), (V{"a", "٣", "b", "²", "c", "1", "2", " x", "⅓"}));
  EXPECT_EQ(Pieces(k, "The café costs 12.50€."),
            (V{"The", " café", " costs", " ", "1", "2", ".", "5", "0", "€."}));
}

TEST(PreTokenizerTest, Llama3) {
  const auto k = PreTokenizerKind::kLlama3;
  EXPECT_EQ(Pieces(k, "Hello  WORLD's 12345 x\n\n  y"),
            (V{"Hello", " ", " WORLD", "'s", " ", "123", "45", " x", "\n\n", " ", " y"}));
  EXPECT_EQ(Pieces(k, "a.\n\n\tb!!\r\nc"), (V{"a", ".\n\n", "\tb", "!!\r\n", "c"}));
  EXPECT_EQ(Pieces(k, "I'LL 'Ve 1234567 ;-)  \n"),
            (V{"I", "'LL", " '", "Ve", " ", "123", "456", "7", " ;-)", "  \n"}));
}

TEST(PreTokenizerTest, IllFormedBytesAreKeptAsPunctuation) {
  const std::string text = "ab\xFF\xFE cd";
  const V pieces = Pieces(PreTokenizerKind::kGpt2, text);
  EXPECT_EQ(pieces, (V{"ab", "\xFF\xFE", " cd"}));
}

TEST(PreTokenizerTest, GgufPreNames) {
  EXPECT_EQ(PreTokenizerForGgufPre("smollm"), PreTokenizerKind::kDigitsGpt2);
  EXPECT_EQ(PreTokenizerForGgufPre("gpt-2"), PreTokenizerKind::kGpt2);
  EXPECT_FALSE(PreTokenizerForGgufPre("default").has_value());  // a converter's "unknown"
  EXPECT_EQ(PreTokenizerForGgufPre("llama-bpe"), PreTokenizerKind::kLlama3);
  EXPECT_EQ(PreTokenizerForGgufPre("qwen2"), PreTokenizerKind::kQwen2);
  EXPECT_EQ(PreTokenizerForGgufPre("command-r"), PreTokenizerKind::kDigitsGpt2);
  EXPECT_EQ(PreTokenizerForGgufPre("deepseek-llm"), PreTokenizerKind::kDeepseekLlm);
  EXPECT_FALSE(PreTokenizerForGgufPre("deepseek-v3").has_value());
  EXPECT_FALSE(PreTokenizerForGgufPre("").has_value());
}

TEST(PreTokenizerTest, Qwen35LetterRunsTakeMarks) {
  const std::string text = "a\u0301b";  // a, U+0301 (combining acute), b
  // Qwen2: the mark is "other" and prefixes the next letter run.
  EXPECT_EQ(Pieces(PreTokenizerKind::kQwen2, text), (V{"a", "\u0301b"}));
  EXPECT_EQ(Pieces(PreTokenizerKind::kQwen35, text), (V{text}));
}

TEST(PreTokenizerTest, FalconIsolatesPunctuationThenGpt2ThenDigitTriples) {
  EXPECT_EQ(Pieces(PreTokenizerKind::kFalcon, "Hello, 12345 world!!"),
            (V{"Hello", ",", " ", "123", "45", " world", "!!"}));
}

TEST(PreTokenizerTest, DeepseekCoderSequence) {
  // [\r\n], then \s?\p{L}+, \s?\p{P}+, CJK runs, single numbers.
  EXPECT_EQ(Pieces(PreTokenizerKind::kDeepseekCoder, "ab, 12\ncd"),
            (V{"ab", ",", " ", "1", "2", "\n", "cd"}));
}

TEST(PreTokenizerTest, DeepseekLlmSplitsTrailingWhitespaceInLinearTime) {
  EXPECT_EQ(Pieces(PreTokenizerKind::kDeepseekLlm, "ab 12  "), (V{"ab", " ", "12", "  "}));
  // A long run of spaces inside a piece: one scan, not one per space (else this takes hours).
  const std::string spaces(200000, ' ');
  EXPECT_EQ(Pieces(PreTokenizerKind::kDeepseekLlm, spaces + "5"), (V{spaces, "5"}));
}

TEST(PreTokenizerTest, Qwen2TakesOneDigitPerPiece) {
  EXPECT_EQ(Pieces(PreTokenizerKind::kQwen2, "abc 12345 x"),
            (V{"abc", " ", "1", "2", "3", "4", "5", " x"}));
  EXPECT_EQ(Pieces(PreTokenizerKind::kLlama3, "abc 12345 x"), (V{"abc", " ", "123", "45", " x"}));
}

}  // namespace
}  // namespace tandem
