// The vocabulary adapter (token id -> exact output bytes, special tokens never allowed) on
// byte-level BPE and SentencePiece tokenizers, and GrammarCache.
#include "model/grammar/vocabulary.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/grammar/grammar_cache.h"
#include "model/grammar/matcher.h"
#include "model/tokenizer/byte_level.h"
#include "model/tokenizer/tokenizer.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<Tokenizer> Make(TokenizerSpec spec) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::Create(std::move(spec));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : nullptr;
}

TEST(VocabularyTest, ByteLevelBpeTokensAreTheirRawBytes) {
  TokenizerSpec spec;
  spec.model = TokenizerModel::kByteLevelBpe;
  spec.tokens = {"<|endoftext|>",        "<|im_end|>",          BytesToByteLevel(" world"),
                 BytesToByteLevel("\n"), BytesToByteLevel("é"), BytesToByteLevel("\xC3"),
                 "<tool_call>"};
  spec.kinds = {TokenKind::kControl,    TokenKind::kControl, TokenKind::kNormal,
                TokenKind::kNormal,     TokenKind::kNormal,  TokenKind::kNormal,
                TokenKind::kUserDefined};
  spec.eos_id = 1;
  std::unique_ptr<Tokenizer> tok = Make(spec);
  ASSERT_NE(tok, nullptr);
  const Vocabulary v = Vocabulary::FromTokenizer(*tok);
  ASSERT_EQ(v.size(), 7);
  EXPECT_TRUE(v.IsNeverAllowed(0));
  EXPECT_TRUE(v.IsNeverAllowed(1));
  EXPECT_EQ(v.TokenBytes(2), " world");
  EXPECT_EQ(v.TokenBytes(3), "\n");
  EXPECT_EQ(v.TokenBytes(4), "é");
  EXPECT_EQ(v.TokenBytes(5), "\xC3");
  EXPECT_FALSE(v.IsNeverAllowed(6));  // user-defined: its text
  EXPECT_EQ(v.TokenBytes(6), "<tool_call>");
  EXPECT_EQ(v.max_token_bytes(), 13u);
  EXPECT_TRUE(v.IsNeverAllowed(-1));
  EXPECT_EQ(v.TokenBytes(99), "");
  // A control token the caller allows becomes its text.
  const int32_t allow[] = {1};
  const Vocabulary v2 = Vocabulary::FromTokenizer(*tok, allow);
  EXPECT_FALSE(v2.IsNeverAllowed(1));
  EXPECT_TRUE(v2.IsNeverAllowed(0));
}

TEST(VocabularyTest, SentencePieceSpacesAndByteTokens) {
  TokenizerSpec spec;
  spec.model = TokenizerModel::kSentencePiece;
  spec.tokens = {"<unk>", "<s>", "</s>", "<0x0A>", "<0xC3>", "▁hello", "world▁", "{"};
  spec.kinds = {TokenKind::kUnknown, TokenKind::kControl, TokenKind::kControl, TokenKind::kByte,
                TokenKind::kByte,    TokenKind::kNormal,  TokenKind::kNormal,  TokenKind::kNormal};
  spec.scores.assign(spec.tokens.size(), 0);
  spec.bos_id = 1;
  spec.eos_id = 2;
  spec.unk_id = 0;
  std::unique_ptr<Tokenizer> tok = Make(spec);
  ASSERT_NE(tok, nullptr);
  const Vocabulary v = Vocabulary::FromTokenizer(*tok);
  EXPECT_TRUE(v.IsNeverAllowed(0));
  EXPECT_TRUE(v.IsNeverAllowed(1));
  EXPECT_TRUE(v.IsNeverAllowed(2));
  EXPECT_EQ(v.TokenBytes(3), "\n");
  EXPECT_EQ(v.TokenBytes(4), "\xC3");
  EXPECT_EQ(v.TokenBytes(5), " hello");
  EXPECT_EQ(v.TokenBytes(6), "world ");
  // A grammar sees those bytes.
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> g =
      CompileGrammar("root ::= \" hello\" \"\\n\" \"{\"", v);
  ASSERT_TRUE(g.ok()) << g.status();
  GrammarMatcher m(*g);
  EXPECT_TRUE(m.IsAllowed(5));
  EXPECT_FALSE(m.IsAllowed(6));
  ASSERT_TRUE(m.Accept(5).ok());
  ASSERT_TRUE(m.Accept(3).ok());
  ASSERT_TRUE(m.Accept(7).ok());
  EXPECT_TRUE(m.IsTerminated());
}

TEST(VocabularyTest, FromTokenBytesChecksSizes) {
  EXPECT_FALSE(Vocabulary::FromTokenBytes({}).ok());
  EXPECT_FALSE(Vocabulary::FromTokenBytes({"a", "b"}, {true}).ok());
  absl::StatusOr<Vocabulary> v = Vocabulary::FromTokenBytes({"a", "", "b"});
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->IsNeverAllowed(1));  // empty
}

Vocabulary SmallVocab() {
  std::vector<std::string> bytes;
  for (int b = 0; b < 128; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
  return *Vocabulary::FromTokenBytes(std::move(bytes));
}

TEST(GrammarCacheTest, CompilesOncePerKindAndText) {
  GrammarCache cache(SmallVocab(), 2);
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> a = cache.Get(
      GrammarKind::kJsonSchema, R"({"type": "object", "properties": {"b": {}, "a": {}}})");
  ASSERT_TRUE(a.ok()) << a.status();
  // The same schema spaced differently is the same entry; key order matters (it orders output).
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> a2 =
      cache.Get(GrammarKind::kJsonSchema, R"({"type":"object","properties":{"b":{},"a":{}}})");
  ASSERT_TRUE(a2.ok());
  EXPECT_EQ(a->get(), a2->get());
  EXPECT_EQ(cache.hits(), 1);
  EXPECT_EQ(cache.misses(), 1);
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> r = cache.Get(GrammarKind::kRegex, "a+");
  ASSERT_TRUE(r.ok());
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> o =
      cache.Get(GrammarKind::kJsonObject, "");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(cache.size(), 2u);  // capacity 2: the schema was evicted
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> a3 =
      cache.Get(GrammarKind::kJsonSchema, R"({"type":"object","properties":{"b":{},"a":{}}})");
  ASSERT_TRUE(a3.ok());
  EXPECT_NE(a->get(), a3->get());
  EXPECT_EQ(cache.misses(), 4);
}

TEST(GrammarCacheTest, ErrorsAreReturnedWithTheirMessages) {
  GrammarCache cache(SmallVocab());
  EXPECT_THAT(cache.Get(GrammarKind::kJsonSchema, "{nope").status().message(),
              HasSubstr("not valid JSON"));
  EXPECT_THAT(cache.Get(GrammarKind::kJsonSchema, R"({"not": {}})").status().message(),
              HasSubstr("unsupported keyword 'not'"));
  EXPECT_THAT(cache.Get(GrammarKind::kRegex, "(?=a)").status().message(), HasSubstr("lookahead"));
  EXPECT_THAT(cache.Get(GrammarKind::kGbnf, "root ::= x").status().message(),
              HasSubstr("undefined rule 'x'"));
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_STREQ(GrammarKindName(GrammarKind::kJsonObject), "json_object");
}

TEST(GrammarCacheTest, ThreadsShareEntriesAndLazySets) {
  GrammarCache cache(SmallVocab(), 8);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        const std::string re = "[a-z]{0," + std::to_string(5 + (i + t) % 4) + "}1";
        absl::StatusOr<std::shared_ptr<const CompiledGrammar>> g =
            cache.Get(GrammarKind::kRegex, re);
        if (!g.ok()) {
          ++failures;
          continue;
        }
        GrammarMatcher m(*g);
        std::vector<uint64_t> mask;
        for (int k = 0; k < 5; ++k) {
          m.FillAllowedMask(&mask);
          if (!m.Accept('a').ok()) ++failures;
        }
        if (!m.Accept('1').ok() || !m.IsTerminated()) ++failures;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(cache.size(), 4u);
}

}  // namespace
}  // namespace tandem
