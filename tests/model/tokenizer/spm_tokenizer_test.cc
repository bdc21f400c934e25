// SentencePiece vocabularies (SpmMerger through the Tokenizer) and the GGUF rules that build
// tokenizers: llama.cpp's defaults, Llama 3's ignore_merges, Phi-3's rstrip, refusals by name.
// Hand-made vocabularies, so every expectation is worked out in the comments.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/format/gguf_file.h"
#include "model/format/gguf_writer.h"
#include "model/tokenizer/gguf_tokenizer.h"
#include "model/tokenizer/streaming_decoder.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/model/format/status_matchers.h"

namespace tandem {
namespace {

using V = std::vector<std::string>;

struct Normal {
  std::string text;
  float score;
};

// 0 <unk> (unknown), 1 <s>, 2 </s> (control), 3 <|u|> (user-defined), then (with_bytes)
// 256 byte tokens <0x00>..<0xFF>, then the normal tokens.
TokenizerSpec SpmSpec(const std::vector<Normal>& normal, bool with_bytes = true) {
  TokenizerSpec spec;
  spec.model = TokenizerModel::kSentencePiece;
  spec.tokens = {"<unk>", "<s>", "</s>", "<|u|>"};
  spec.kinds = {TokenKind::kUnknown, TokenKind::kControl, TokenKind::kControl,
                TokenKind::kUserDefined};
  spec.scores = {0, 0, 0, 0};
  if (with_bytes) {
    for (int b = 0; b < 256; ++b) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
      spec.tokens.push_back(hex);
      spec.kinds.push_back(TokenKind::kByte);
      spec.scores.push_back(0);
    }
  }
  for (const Normal& n : normal) {
    spec.tokens.push_back(n.text);
    spec.kinds.push_back(TokenKind::kNormal);
    spec.scores.push_back(n.score);
  }
  spec.bos_id = 1;
  spec.eos_id = 2;
  spec.unk_id = 0;
  return spec;
}

std::unique_ptr<Tokenizer> Make(TokenizerSpec spec) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::Create(std::move(spec));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

V Texts(const Tokenizer& t, const std::vector<int32_t>& ids) {
  V out;
  for (const int32_t id : ids) out.emplace_back(*t.TokenText(id));
  return out;
}

const std::vector<Normal> kAbc = {{"a", -1}, {"b", -1}, {"c", -1}, {"ab", -5}, {"bc", -1}};

TEST(SpmTest, HighestScoreMergesFirst) {
  // "ab" (-5) and "bc" (-1) compete for the b: bc wins, and "abc" is no token.
  auto t = Make(SpmSpec(kAbc));
  EXPECT_EQ(Texts(*t, t->Encode("abc", false, false)), (V{"a", "bc"}));
  std::vector<Normal> ab_first = kAbc;
  ab_first[3].score = -0.5f;
  auto u = Make(SpmSpec(ab_first));
  EXPECT_EQ(Texts(*u, u->Encode("abc", false, false)), (V{"ab", "c"}));
}

TEST(SpmTest, EqualScoresMergeLeftmostFirst) {
  auto t = Make(SpmSpec({{"a", -1}, {"aa", -1}}));
  EXPECT_EQ(Texts(*t, t->Encode("aaa", false, false)), (V{"aa", "a"}));
  EXPECT_EQ(Texts(*t, t->Encode("aaaaa", false, false)), (V{"aa", "aa", "a"}));
}

TEST(SpmTest, MissingCharactersFallBackToByteTokens) {
  auto t = Make(SpmSpec(kAbc));
  const std::vector<int32_t> ids = t->Encode("a\xC3\xA9", false, false);  // "aé"
  EXPECT_EQ(Texts(*t, ids), (V{"a", "<0xC3>", "<0xA9>"}));
  EXPECT_EQ(t->Decode(ids), "a\xC3\xA9");
  // Without byte tokens each byte becomes the unknown token.
  auto u = Make(SpmSpec(kAbc, /*with_bytes=*/false));
  EXPECT_EQ(Texts(*u, u->Encode("a\xC3\xA9", false, false)), (V{"a", "<unk>", "<unk>"}));
}

const std::vector<Normal> kSpaced = {{"\xE2\x96\x81", -10}, {"a", -1}, {"b", -1}, {"▁a", -0.1f}};

TEST(SpmTest, SpacesBecomeMetaSymbolAndThePrefixSpaceIsDroppedOnDecode) {
  TokenizerSpec spec = SpmSpec(kSpaced);
  spec.add_space_prefix = true;
  auto t = Make(std::move(spec));
  // "a b" -> "▁a▁b": "▁a" merges, "▁b" is no token.
  std::vector<int32_t> ids = t->Encode("a b", false, false);
  EXPECT_EQ(Texts(*t, ids), (V{"▁a", "▁", "b"}));
  EXPECT_EQ(t->Decode(ids), "a b");
  // A leading space survives: "▁▁a" decodes to "  a" less the prefix space.
  ids = t->Encode(" a", false, false);
  EXPECT_EQ(Texts(*t, ids), (V{"▁", "▁a"}));
  EXPECT_EQ(t->Decode(ids), " a");
  EXPECT_TRUE(t->Encode("", false, false).empty());
}

TEST(SpmTest, WithoutSpacePrefixNothingIsAddedOrStripped) {
  auto t = Make(SpmSpec(kSpaced));
  const std::vector<int32_t> ids = t->Encode("a a", false, false);
  EXPECT_EQ(Texts(*t, ids), (V{"a", "▁a"}));
  EXPECT_EQ(t->Decode(ids), "a a");
}

TEST(SpmTest, BosAndEosFollowTheSpec) {
  TokenizerSpec spec = SpmSpec(kSpaced);
  spec.add_space_prefix = true;
  spec.add_bos = true;
  spec.add_eos = true;
  auto t = Make(std::move(spec));
  const std::vector<int32_t> ids = t->Encode("a");
  EXPECT_EQ(Texts(*t, ids), (V{"<s>", "▁a", "</s>"}));
  EXPECT_EQ(Texts(*t, t->Encode("a", false, /*with_bos=*/false)), (V{"▁a"}));
  // The first token is <s>: nothing to strip. Skipping specials removes the BOS and then, as
  // llama.cpp does, keeps the space after it.
  EXPECT_EQ(t->Decode(ids), "<s> a</s>");
  EXPECT_EQ(t->Decode(ids, /*skip_special=*/true), " a");
}

TEST(SpmTest, SpecialTokensAndThePrefixSpaceAfterThem) {
  TokenizerSpec spec = SpmSpec(kSpaced);
  spec.add_space_prefix = true;
  auto t = Make(std::move(spec));
  // Every plain span gets the prefix space, also after a special token.
  EXPECT_EQ(Texts(*t, t->Encode("a<s>a", /*parse_special=*/true, false)), (V{"▁a", "<s>", "▁a"}));
  // Control and unknown tokens are text unless parse_special; user-defined ones always match.
  for (const int32_t id : t->Encode("<s><unk>", false, false)) EXPECT_GT(id, 3);
  EXPECT_EQ(Texts(*t, t->Encode("<unk>", true, false)), (V{"<unk>"}));
  EXPECT_EQ(Texts(*t, t->Encode("a<|u|>a", false, false)), (V{"▁a", "<|u|>", "▁a"}));
  // skip_special drops control and unknown tokens, keeps user-defined ones.
  const std::vector<int32_t> ids = t->Encode("a<|u|><unk><s>", true, false);
  EXPECT_EQ(t->Decode(ids, /*skip_special=*/true), "a<|u|>");
}

TEST(SpmTest, RstripTokensSwallowTheWhitespaceAfterThem) {
  TokenizerSpec spec = SpmSpec(kSpaced);
  spec.add_space_prefix = true;
  spec.rstrip_ids = {3};
  auto t = Make(std::move(spec));
  EXPECT_EQ(Texts(*t, t->Encode("a<|u|> \n\t a", false, false)), (V{"▁a", "<|u|>", "▁a"}));
  EXPECT_EQ(Texts(*t, t->Encode("a<|u|> ", false, false)), (V{"▁a", "<|u|>"}));
}

TEST(SpmTest, StreamingDecodingEqualsDecode) {
  TokenizerSpec spec = SpmSpec(kSpaced);
  spec.add_space_prefix = true;
  auto t = Make(std::move(spec));
  const std::vector<int32_t> ids = t->Encode("a b \xE2\x82\xAC a", false, false);  // "a b € a"
  for (const bool skip : {false, true}) {
    StreamingDecoder d(*t, skip);
    std::string streamed;
    for (const int32_t id : ids) streamed += d.Push(id);
    streamed += d.Flush();
    EXPECT_EQ(streamed, t->Decode(ids, skip));
    EXPECT_EQ(streamed, "a b \xE2\x82\xAC a");
    // After Flush the decoder starts a new sequence: the first space is dropped again.
    EXPECT_EQ(d.Push(ids[0]), "a");
  }
}

TEST(SpmTest, MalformedSpecsAreRefused) {
  TokenizerSpec spec = SpmSpec(kAbc);
  spec.scores.pop_back();
  EXPECT_STATUS_IS(Tokenizer::Create(std::move(spec)), absl::StatusCode::kInvalidArgument,
                   "scores");
  TokenizerSpec bad_rstrip = SpmSpec(kAbc);
  bad_rstrip.rstrip_ids = {100000};
  EXPECT_STATUS_IS(Tokenizer::Create(std::move(bad_rstrip)), absl::StatusCode::kInvalidArgument,
                   "rstrip id 100000");
}

// --- GGUF rules -------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Tokenizer>> FromWriter(const GgufWriter& w) {
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::FromBytes(w.Serialize(), "t.gguf");
  if (!f.ok()) return f.status();
  return TokenizerFromGguf(**f);
}

GgufWriter SpmGguf() {
  GgufWriter w;
  w.Set("tokenizer.ggml.model", GgufValue::String("llama"));
  w.Set("tokenizer.ggml.tokens",
        GgufValue::StringArray({"<unk>", "<s>", "</s>", "<|u|>", "a", "▁a"}));
  w.Set("tokenizer.ggml.token_type", GgufValue::Int32Array({2, 3, 3, 4, 1, 1}));
  w.Set("tokenizer.ggml.scores", GgufValue::Float32Array({0, 0, 0, 0, -1, -0.5f}));
  return w;
}

TEST(GgufTokenizerTest, SentencePieceDefaultsAreLlamaCpps) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = FromWriter(SpmGguf());
  ASSERT_OK(t);
  const Tokenizer& tok = **t;
  EXPECT_EQ(tok.model(), TokenizerModel::kSentencePiece);
  EXPECT_EQ(tok.bos_id(), 1);  // unnamed: <s> is 1, </s> is 2
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_TRUE(tok.add_bos());
  EXPECT_FALSE(tok.add_eos());
  EXPECT_EQ(Texts(tok, tok.Encode("a")), (V{"<s>", "▁a"}));  // space prefix on by default
}

TEST(GgufTokenizerTest, SentencePieceKeysOverrideTheDefaults) {
  GgufWriter w = SpmGguf();
  w.Set("tokenizer.ggml.add_space_prefix", GgufValue::Bool(false));
  w.Set("tokenizer.ggml.add_bos_token", GgufValue::Bool(false));
  w.Set("tokenizer.ggml.add_eos_token", GgufValue::Bool(true));
  w.Set("tokenizer.ggml.eos_token_id", GgufValue::Uint32(3));
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = FromWriter(w);
  ASSERT_OK(t);
  EXPECT_EQ(Texts(**t, (*t)->Encode("a")), (V{"a", "<|u|>"}));
}

TEST(GgufTokenizerTest, Phi3NameMakesSpecialTokensSwallowWhitespace) {
  GgufWriter w = SpmGguf();
  w.Set("general.name", GgufValue::String("Phi3"));
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = FromWriter(w);
  ASSERT_OK(t);
  EXPECT_EQ(Texts(**t, (*t)->Encode("a<|u|>\na", false, false)), (V{"▁a", "<|u|>", "▁a"}));
  // <s> keeps the whitespace after it: " a" gets the prefix space, "▁▁a" is "▁" + "▁a", and
  // "▁" (3 bytes) has neither a token nor byte tokens here, so it is 3 unknown tokens.
  EXPECT_EQ(Texts(**t, (*t)->Encode("<s> a", true, false)),
            (V{"<s>", "<unk>", "<unk>", "<unk>", "▁a"}));
}

TEST(GgufTokenizerTest, UnsupportedValuesAreRefusedByName) {
  GgufWriter w = SpmGguf();
  w.Set("tokenizer.ggml.remove_extra_whitespaces", GgufValue::Bool(true));
  EXPECT_STATUS_IS(FromWriter(w), absl::StatusCode::kUnimplemented,
                   "unsupported tokenizer.ggml.remove_extra_whitespaces 'true'");
  GgufWriter bert = SpmGguf();
  bert.Set("tokenizer.ggml.model", GgufValue::String("bert"));
  EXPECT_STATUS_IS(FromWriter(bert), absl::StatusCode::kUnimplemented,
                   "unsupported tokenizer.ggml.model 'bert'");
  GgufWriter bpe;
  bpe.Set("tokenizer.ggml.model", GgufValue::String("gpt2"));
  bpe.Set("tokenizer.ggml.pre", GgufValue::String("xyz"));
  bpe.Set("tokenizer.ggml.tokens", GgufValue::StringArray({"a"}));
  bpe.Set("tokenizer.ggml.merges", GgufValue::StringArray({}));
  EXPECT_STATUS_IS(FromWriter(bpe), absl::StatusCode::kUnimplemented,
                   "unsupported tokenizer.ggml.pre 'xyz'");
  bpe.Set("tokenizer.ggml.pre", GgufValue::String("default"));
  EXPECT_STATUS_IS(FromWriter(bpe), absl::StatusCode::kUnimplemented,
                   "unsupported tokenizer.ggml.pre 'default'");
  GgufWriter no_pre;
  no_pre.Set("tokenizer.ggml.model", GgufValue::String("gpt2"));
  no_pre.Set("tokenizer.ggml.tokens", GgufValue::StringArray({"a"}));
  no_pre.Set("tokenizer.ggml.merges", GgufValue::StringArray({}));
  EXPECT_STATUS_IS(FromWriter(no_pre), absl::StatusCode::kUnimplemented,
                   "unsupported tokenizer.ggml.pre '' (missing");
}

GgufWriter BpeGguf(const std::string& pre) {
  GgufWriter w;
  w.Set("tokenizer.ggml.model", GgufValue::String("gpt2"));
  w.Set("tokenizer.ggml.pre", GgufValue::String(pre));
  // "hello" is a token no merge reaches.
  w.Set("tokenizer.ggml.tokens",
        GgufValue::StringArray({"<|bos|>", "h", "e", "l", "o", "he", "hello"}));
  w.Set("tokenizer.ggml.token_type", GgufValue::Int32Array({3, 1, 1, 1, 1, 1, 1}));
  w.Set("tokenizer.ggml.merges", GgufValue::StringArray({"h e"}));
  w.Set("tokenizer.ggml.bos_token_id", GgufValue::Uint32(0));
  return w;
}

TEST(GgufTokenizerTest, Llama3KeepsWholeTokensAndAddsBosByDefault) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> llama3 = FromWriter(BpeGguf("llama-bpe"));
  ASSERT_OK(llama3);
  EXPECT_TRUE((*llama3)->add_bos());
  EXPECT_EQ(Texts(**llama3, (*llama3)->Encode("hello")), (V{"<|bos|>", "hello"}));
  absl::StatusOr<std::unique_ptr<Tokenizer>> gpt2 = FromWriter(BpeGguf("gpt-2"));
  ASSERT_OK(gpt2);
  EXPECT_FALSE((*gpt2)->add_bos());
  EXPECT_EQ(Texts(**gpt2, (*gpt2)->Encode("hello")), (V{"he", "l", "l", "o"}));
}

// tokenizer.ggml.eot_token_id / eom_token_id (Llama 3.1's <|eot_id|>, <|eom_id|>) end
// generation along with EOS, whatever their text; an id outside the vocabulary is refused.
TEST(GgufTokenizerTest, EotAndEomIdsAreStops) {
  GgufWriter w = SpmGguf();
  w.Set("tokenizer.ggml.eot_token_id", GgufValue::Uint32(3));
  w.Set("tokenizer.ggml.eom_token_id", GgufValue::Uint32(5));
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = FromWriter(w);
  ASSERT_OK(t);
  EXPECT_THAT((*t)->stop_ids(), ::testing::UnorderedElementsAre(2, 3, 5));
  w.Set("tokenizer.ggml.eom_token_id", GgufValue::Uint32(6));
  EXPECT_STATUS_IS(FromWriter(w), absl::StatusCode::kInvalidArgument, "stop id 6");
}

}  // namespace
}  // namespace tandem
