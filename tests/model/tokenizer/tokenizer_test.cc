// The Tokenizer on hand-made vocabularies and on the synthetic model's vocabulary.
#include "model/tokenizer/tokenizer.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/tokenizer/byte_level.h"
#include "model/tokenizer/chat.h"
#include "model/tokenizer/streaming_decoder.h"
#include "model/tokenizer/utf8.h"
#include "model/tools/synthetic_vocab.h"
#include "tests/model/format/status_matchers.h"

namespace tandem {
namespace {

// Byte tokens 0..255 (in byte order), then `merged` tokens, with the given merges.
std::unique_ptr<Tokenizer> Tiny(std::vector<std::pair<std::string, std::string>> merges,
                                std::vector<std::string> merged) {
  TokenizerSpec spec;
  for (int b = 0; b < 256; ++b)
    spec.tokens.push_back(BytesToByteLevel(std::string(1, static_cast<char>(b))));
  for (std::string& m : merged) spec.tokens.push_back(std::move(m));
  spec.merges = std::move(merges);
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::Create(std::move(spec));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

std::vector<std::string> Texts(const Tokenizer& t, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (const int32_t id : ids) out.emplace_back(*t.TokenText(id));
  return out;
}

using V = std::vector<std::string>;

TEST(BpeTest, LowestRankFirstLeftmostOnTies) {
  // "abc": ab (rank 0) then abc (rank 1); bc (rank 2) never applies.
  auto t = Tiny({{"a", "b"}, {"ab", "c"}, {"b", "c"}}, {"ab", "abc", "bc"});
  EXPECT_EQ(Texts(*t, t->Encode("abc")), (V{"abc"}));
  EXPECT_EQ(Texts(*t, t->Encode("bcab")), (V{"bc", "ab"}));
  // Equal ranks: the leftmost pair merges first, so "aaa" is "aa" + "a".
  auto aa = Tiny({{"a", "a"}}, {"aa"});
  EXPECT_EQ(Texts(*aa, aa->Encode("aaa")), (V{"aa", "a"}));
  EXPECT_EQ(Texts(*aa, aa->Encode("aaaa")), (V{"aa", "aa"}));
  // Merges never cross pre-tokenizer pieces: "a a" is "a" + " a", so "a " never forms.
  auto sp = Tiny({{"a", "Ġ"}}, {"aĠ"});
  EXPECT_EQ(Texts(*sp, sp->Encode("a a")), (V{"a", "Ġ", "a"}));
}

TEST(BpeTest, LongRunsStayCorrect) {
  auto aa = Tiny({{"a", "a"}, {"aa", "aa"}}, {"aa", "aaaa"});
  const std::vector<int32_t> ids = aa->Encode(std::string(10001, 'a'));
  ASSERT_EQ(ids.size(), 2501u);  // 2500 × "aaaa" + "a"
  EXPECT_EQ(aa->Decode(ids), std::string(10001, 'a'));
}

TEST(BpeTest, BytesWithoutATokenAreDropped) {
  TokenizerSpec spec;
  for (int b = 0; b < 256; ++b) {
    if (b != 'b') spec.tokens.push_back(BytesToByteLevel(std::string(1, static_cast<char>(b))));
  }
  spec.tokens.push_back("ac");
  spec.merges = {{"a", "c"}};
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::Create(std::move(spec));
  ASSERT_OK(t);
  // As HF's BPE without an unknown token: 'b' vanishes and its neighbours merge.
  EXPECT_EQ(Texts(**t, (*t)->Encode("abc")), (V{"ac"}));
}

TEST(BpeTest, RejectsMergesOutsideTheVocabulary) {
  TokenizerSpec spec;
  for (int b = 0; b < 256; ++b)
    spec.tokens.push_back(BytesToByteLevel(std::string(1, static_cast<char>(b))));
  spec.merges = {{"a", "b"}};
  EXPECT_STATUS_IS(Tokenizer::Create(spec), absl::StatusCode::kInvalidArgument,
                   "BPE merge #0 'a b' uses a token missing from the vocabulary");
  spec.merges.clear();
  spec.eos_id = 999;
  EXPECT_STATUS_IS(Tokenizer::Create(spec), absl::StatusCode::kInvalidArgument,
                   "tokenizer eos id 999 is outside the vocabulary [0, 256)");
  EXPECT_STATUS_IS(Tokenizer::Create(TokenizerSpec{}), absl::StatusCode::kInvalidArgument,
                   "tokenizer vocabulary is empty");
}

class SyntheticTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<SyntheticVocab> v = BuildSyntheticVocab(320);
    ASSERT_OK(v);
    TokenizerSpec spec;
    spec.tokens = v->tokens;
    spec.kinds = v->kinds;
    spec.merges = v->merges;
    spec.pre = PreTokenizerKind::kDigitsGpt2;
    spec.bos_id = 1;
    spec.eos_id = 2;
    absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::Create(std::move(spec));
    ASSERT_OK(t);
    tok_ = std::move(*t);
  }
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(SyntheticTokenizerTest, VocabularyLayout) {
  EXPECT_EQ(tok_->vocab_size(), 320);
  EXPECT_EQ(*tok_->TokenText(0), "<|endoftext|>");
  EXPECT_EQ(*tok_->SpecialTokenId("<|im_start|>"), 1);
  EXPECT_EQ(*tok_->SpecialTokenId("<|im_end|>"), 2);
  EXPECT_EQ(*tok_->TokenText(3 + ' '), "Ġ");
  EXPECT_EQ(tok_->stop_ids(), (std::vector<int32_t>{2, 0}));
  EXPECT_TRUE(tok_->IsStop(0));
  EXPECT_FALSE(tok_->IsStop(1));
  EXPECT_STATUS_IS(tok_->TokenText(320), absl::StatusCode::kNotFound,
                   "token id 320 is outside the vocabulary [0, 320)");
  EXPECT_STATUS_IS(tok_->SpecialTokenId("<|nope|>"), absl::StatusCode::kNotFound,
                   "no special token '<|nope|>'");
}

TEST_F(SyntheticTokenizerTest, MergesLearnedFromTheCorpusApply) {
  // " the" is the corpus' most frequent word, so it is one token.
  const std::vector<int32_t> ids = tok_->Encode(" the");
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_EQ(*tok_->TokenText(ids[0]), "Ġthe");
  EXPECT_LT(tok_->Encode("The quick brown fox jumps over the lazy dog.").size(), 44u);
}

TEST_F(SyntheticTokenizerTest, RoundTripsArbitraryText) {
  for (const std::string& text : std::vector<std::string>{
           "Hello, world!", "naïve café — 日本語 😀👨‍👩‍👧",
           "  lots   of\t\tspace\r\n\n", "x=1234567;", "<|im_end|> as plain text",
           std::string("\0\x01\x7f", 3), ""}) {
    EXPECT_EQ(tok_->Decode(tok_->Encode(text)), text) << text;
  }
}

TEST_F(SyntheticTokenizerTest, SpecialTokensOnlyWhenAsked) {
  const std::string text = "a<|im_end|>b";
  const std::vector<int32_t> parsed = tok_->Encode(text, /*parse_special=*/true);
  EXPECT_EQ(parsed, (std::vector<int32_t>{3 + 'a', 2, 3 + 'b'}));
  const std::vector<int32_t> plain = tok_->Encode(text);
  EXPECT_GT(plain.size(), 3u);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 2), 0);
  EXPECT_EQ(tok_->Decode(parsed), text);
  EXPECT_EQ(tok_->Decode(parsed, /*skip_special=*/true), "ab");
}

TEST_F(SyntheticTokenizerTest, ChatMlPrompt) {
  const ChatMessage messages[] = {{"system", "Be brief."}, {"user", "Hi"}};
  const std::string prompt = FormatChatMl(messages);
  EXPECT_EQ(prompt,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(FormatChatMl(messages, /*add_generation_prompt=*/false).size(),
            prompt.size() - std::string("<|im_start|>assistant\n").size());
  const std::vector<int32_t> ids = tok_->Encode(prompt, /*parse_special=*/true);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 1), 3);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 2);
  EXPECT_EQ(tok_->Decode(ids), prompt);
}

TEST(SyntheticVocabTest, LargeVocabulariesStayUniqueAndDecodable) {
  EXPECT_STATUS_IS(BuildSyntheticVocab(258), absl::StatusCode::kInvalidArgument,
                   "vocabulary size 258 is below the minimum 259");
  absl::StatusOr<SyntheticVocab> v = BuildSyntheticVocab(2000);
  ASSERT_OK(v);
  ASSERT_EQ(v->tokens.size(), 2000u);
  EXPECT_EQ(std::set<std::string>(v->tokens.begin(), v->tokens.end()).size(), 2000u);
  // Corpus merges and letter pairs run out before 2000: the tail is reserved control tokens.
  const auto reserved = std::count_if(v->tokens.begin(), v->tokens.end(), [](const std::string& t) {
    return t.rfind("<|reserved_", 0) == 0;
  });
  ASSERT_GT(reserved, 0);
  EXPECT_EQ(v->tokens.back(), "<|reserved_" + std::to_string(reserved - 1) + "|>");
  EXPECT_EQ(v->kinds.back(), TokenKind::kControl);
  TokenizerSpec spec;
  spec.tokens = v->tokens;
  spec.kinds = v->kinds;
  spec.merges = v->merges;
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::Create(std::move(spec));
  ASSERT_OK(t);
  const auto pair = std::find(v->tokens.begin(), v->tokens.end(), "Ġqz");
  ASSERT_NE(pair, v->tokens.end());
  EXPECT_EQ((*t)->Decode({static_cast<int32_t>(pair - v->tokens.begin())}), " qz");
}

TEST(ChatTest, DefaultSystemPromptFromTemplates) {
  // SmolLM2's template as stored in its GGUF (real newlines inside the Jinja literal).
  const std::string smollm2 =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
      "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
      "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
      "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}";
  const std::string expected =
      "You are a helpful AI assistant named SmolLM, trained by Hugging Face";
  EXPECT_EQ(DefaultSystemPrompt(smollm2), expected);
  // The same template with escaped newlines (as some tokenizer_config.json files hold it).
  std::string escaped = smollm2;
  for (size_t at; (at = escaped.find('\n')) != std::string::npos;) escaped.replace(at, 1, "\\n");
  EXPECT_EQ(DefaultSystemPrompt(escaped), expected);
  EXPECT_EQ(DefaultSystemPrompt("{{'<|im_start|>' + message['role']}}"), "");
  const ChatMessage user[] = {{"user", "Hi"}};
  EXPECT_EQ(FormatChatMl(user, true, "Sys"),
            "<|im_start|>system\nSys<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n");
  const ChatMessage with_system[] = {{"system", "Mine"}, {"user", "Hi"}};
  EXPECT_EQ(FormatChatMl(with_system, false, "Sys"),
            "<|im_start|>system\nMine<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
}

TEST_F(SyntheticTokenizerTest, IdsAreValidatedAndBadOnesDecodeVisibly) {
  EXPECT_TRUE(tok_->ValidateIds({0, 5, 319}).ok());
  EXPECT_STATUS_IS(tok_->ValidateIds({5, 320}), absl::StatusCode::kInvalidArgument,
                   "token id 320 at position 1 is outside the vocabulary [0, 320)");
  EXPECT_STATUS_IS(tok_->ValidateIds({-1}), absl::StatusCode::kInvalidArgument, "token id -1");
  EXPECT_EQ(tok_->Decode({3 + 'a', 9999, 3 + 'b'}),
            "a\xEF\xBF\xBD"
            "b");
}

// Streams `ids` token by token: every chunk must be well-formed UTF-8 and the concatenation
// must equal Decode.
void ExpectStreamsLikeDecode(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  StreamingDecoder d(tok);
  std::string streamed;
  for (const int32_t id : ids) {
    const std::string chunk = d.Push(id);
    EXPECT_TRUE(IsValidUtf8(chunk)) << "chunk after id " << id;
    streamed += chunk;
  }
  const std::string tail = d.Flush();
  EXPECT_TRUE(IsValidUtf8(tail));
  streamed += tail;
  EXPECT_EQ(streamed, tok.Decode(ids));
}

TEST_F(SyntheticTokenizerTest, StreamingHoldsBackSplitCharacters) {
  // "é" is two byte tokens in this vocabulary; "😀" four.
  StreamingDecoder d(*tok_);
  EXPECT_EQ(d.Push(3 + 0xC3), "");
  EXPECT_EQ(d.pending_bytes(), 1u);
  EXPECT_EQ(d.Push(3 + 0xA9), "é");
  EXPECT_EQ(d.Push(3 + 0xF0), "");
  EXPECT_EQ(d.Push(3 + 0x9F), "");
  EXPECT_EQ(d.Push(3 + 0x98), "");
  EXPECT_EQ(d.Push(3 + 0x80), "😀");
  EXPECT_EQ(d.Flush(), "");
  for (const std::string& text :
       {std::string("naïve café — 日本語 😀👨‍👩‍👧 end"),
        std::string("plain ascii")}) {
    ExpectStreamsLikeDecode(*tok_, tok_->Encode(text));
  }
}

TEST_F(SyntheticTokenizerTest, StreamingReplacesOnlyTrulyInvalidBytes) {
  StreamingDecoder d(*tok_);
  EXPECT_EQ(d.Push(3 + 0xFF), "\xEF\xBF\xBD");  // can never start a character: at once
  EXPECT_EQ(d.Push(3 + 0xE2), "");
  EXPECT_EQ(d.Push(3 + 0x82), "");
  EXPECT_EQ(d.Push(3 + 'A'),
            "\xEF\xBF\xBD"
            "A");  // E2 82 proven invalid by 'A'
  EXPECT_EQ(d.Push(3 + 0xE2), "");
  EXPECT_EQ(d.Flush(), "\xEF\xBF\xBD");  // truncated at the end of the stream
  ExpectStreamsLikeDecode(*tok_,
                          {3 + 0xFF, 3 + 0xE2, 3 + 0x82, 3 + 'A', 2, 3 + 0xC3, 9999, 3 + 0xE2});
}

}  // namespace
}  // namespace tandem
