// The SmolLM2 tokenizer from the real GGUF (label `model`; TANDEM_MODEL names the file).
//
// How the fixed ids were checked: during development the GGUF's tokens and merges were turned
// into a tokenizer.json with SmolLM2's pre-tokenizer (Sequence[Digits(individual_digits),
// ByteLevel]) and encoded with HF `tokenizers`; 330 strings (these plus random mixes of
// accents, CJK, emoji, digits, quotes and whitespace) matched exactly. The token texts below
// are spot checks against the vocabulary itself.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/format/gguf_file.h"
#include "model/tokenizer/chat.h"
#include "model/tokenizer/gguf_tokenizer.h"
#include "model/tokenizer/streaming_decoder.h"
#include "model/tokenizer/utf8.h"
#include "tests/model/format/model_env.h"
#include "tests/model/format/status_matchers.h"

namespace tandem {
namespace {

using Ids = std::vector<int32_t>;

class RealTokenizerTest : public ::tandem::testing::RealModelTest {
 protected:
  void SetUp() override {
    RealModelTest::SetUp();
    if (IsSkipped()) return;
    absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(::tandem::testing::ModelPath());
    ASSERT_OK(f);
    absl::StatusOr<std::unique_ptr<Tokenizer>> t = TokenizerFromGguf(**f);
    ASSERT_OK(t);
    tok_ = std::move(*t);
  }
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(RealTokenizerTest, VocabularyAndSpecialTokens) {
  EXPECT_EQ(tok_->vocab_size(), 49152);
  EXPECT_EQ(tok_->pre_tokenizer(), PreTokenizerKind::kDigitsGpt2);
  EXPECT_EQ(*tok_->TokenText(0), "<|endoftext|>");
  EXPECT_EQ(*tok_->SpecialTokenId("<|im_start|>"), 1);
  EXPECT_EQ(*tok_->SpecialTokenId("<|im_end|>"), 2);
  EXPECT_EQ(tok_->bos_id(), 1);
  EXPECT_EQ(tok_->eos_id(), 2);
  EXPECT_FALSE(tok_->add_bos());
  EXPECT_TRUE(tok_->IsStop(2));
  EXPECT_TRUE(tok_->IsStop(0));
  EXPECT_EQ(*tok_->TokenText(19556), "Hello");
  EXPECT_EQ(*tok_->TokenText(905), "Ġworld");
  EXPECT_EQ(*tok_->TokenText(198), "Ċ");
}

TEST_F(RealTokenizerTest, FixedStringsEncodeToCheckedIds) {
  EXPECT_EQ(tok_->Encode("Hello, world!"), (Ids{19556, 28, 905, 17}));
  EXPECT_EQ(tok_->Encode("The café costs 12.50€."),
            (Ids{504, 37366, 3499, 216, 33, 34, 30, 37, 32, 14195, 30}));
  EXPECT_EQ(tok_->Encode("日本語"), (Ids{23274, 115, 40993, 179, 120, 248}));
  EXPECT_EQ(tok_->Encode("😀 ok"), (Ids{10813, 242, 218, 10907}));
  EXPECT_EQ(tok_->Encode("def f(x):\n    return x  # hi"),
            (Ids{1604, 275, 24, 104, 727, 472, 1003, 1792, 216, 907, 15876}));
  EXPECT_EQ(tok_->Encode("  spaces   here  "), (Ids{216, 5600, 256, 1535, 256}));
  EXPECT_EQ(tok_->Encode("don't"), (Ids{12420, 982}));
}

TEST_F(RealTokenizerTest, ChatPromptUsesSpecialTokens) {
  const ChatMessage messages[] = {{"user", "Hi there"}};
  EXPECT_EQ(tok_->Encode(FormatChatMl(messages), /*parse_special=*/true),
            (Ids{1, 4093, 198, 26843, 665, 2, 198, 1, 520, 9531, 198}));
}

const std::vector<std::string>& VariedTexts() {
  static const std::vector<std::string> texts = {
      "Hello, world!",
      "Ça va? Über naïve façade — señor, smörgåsbord, Øresund.",
      "日本語のテキストです。中文也可以。한국어도 됩니다.",
      "emoji 😀🎉👨‍👩‍👧 flags 🇫🇷 and skin tones 👍🏽",
      "def f(x):\n\treturn {'a': x**2}  # comment\n\n\n",
      "    leading, inner   and trailing whitespace   \n\n  \t ",
      "<|im_start|>user\nliteral special-token strings<|im_end|>\n<|endoftext|>",
      "numbers 3.14159 1e-9 1,000,000 ١٢٣ ²³ ⅓",
      "مرحبا بالعالم — Привет, мир — Γειά σου Κόσμε",
      "zero\u200bwidth\u200d joiners and \u00a0no-break\u3000spaces",
      "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 math 𝟙𝟚𝟛 and ancient 𐌀𐌁𐌂",
  };
  return texts;
}

TEST_F(RealTokenizerTest, EncodeDecodeIsTheIdentity) {
  for (const std::string& text : VariedTexts()) {
    EXPECT_EQ(tok_->Decode(tok_->Encode(text)), text) << text;
    EXPECT_EQ(tok_->Decode(tok_->Encode(text, /*parse_special=*/true)), text) << text;
  }
}

TEST_F(RealTokenizerTest, StreamingMatchesFullDecodeAndNeverSplitsACharacter) {
  for (const std::string& text : VariedTexts()) {
    const std::vector<int32_t> ids = tok_->Encode(text, /*parse_special=*/true);
    StreamingDecoder d(*tok_);
    std::string streamed;
    int held = 0;
    for (const int32_t id : ids) {
      const std::string chunk = d.Push(id);
      ASSERT_TRUE(IsValidUtf8(chunk)) << text;
      if (d.pending_bytes() > 0) ++held;
      streamed += chunk;
    }
    streamed += d.Flush();
    EXPECT_EQ(streamed, text);
    if (text.find("😀") != std::string::npos) {
      EXPECT_GT(held, 0) << "emoji span several tokens, so some bytes must have been held";
    }
  }
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) { return tandem::testing::RunModelTests(argc, argv); }
