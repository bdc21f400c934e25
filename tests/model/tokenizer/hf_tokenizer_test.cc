// tokenizer.json loading on a small hand-written vocabulary. The expected ids were checked by
// loading the same JSON (with all merges as strings) in HF `tokenizers` during development.
#include "model/tokenizer/hf_tokenizer.h"

#include <string>
#include <vector>

#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "tests/model/format/safetensors_test_util.h"
#include "tests/model/format/status_matchers.h"

namespace tandem {
namespace {

using ::tandem::testing::ScopedTempDir;
using ::tandem::testing::WriteFile;

// Merges mix "a b" strings and ["a", "b"] pairs (both forms occur in the wild).
constexpr const char* kJson = R"({
  "version": "1.0",
  "added_tokens": [
    {"id": 19, "content": "<|im_end|>", "special": true},
    {"id": 20, "content": "<tool>", "special": false}],
  "normalizer": null,
  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
    {"type": "Digits", "individual_digits": true},
    {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}]},
  "decoder": {"type": "ByteLevel"},
  "model": {"type": "BPE", "byte_fallback": false,
    "vocab": {"h": 0, "e": 1, "l": 2, "o": 3, "Ġ": 4, "w": 5, "r": 6, "d": 7, "1": 8, "2": 9,
              "he": 10, "ll": 11, "llo": 12, "hello": 13, "Ġw": 14, "or": 15, "Ġwor": 16,
              "ld": 17, "Ġworld": 18},
    "merges": ["h e", "l l", "ll o", "he llo", ["Ġ", "w"], ["o", "r"], ["Ġw", "or"], "l d",
               "Ġwor ld"]}
})";

using Ids = std::vector<int32_t>;

TEST(HfTokenizerTest, EncodesLikeHf) {
  HfSpecialIds ids;
  ids.eos_id = 19;
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = TokenizerFromHfJson(kJson, ids);
  ASSERT_OK(t);
  const Tokenizer& tok = **t;
  EXPECT_EQ(tok.vocab_size(), 21);
  EXPECT_EQ(tok.pre_tokenizer(), PreTokenizerKind::kDigitsGpt2);
  EXPECT_EQ(tok.Encode("hello world12<|im_end|>", /*parse_special=*/true), (Ids{13, 18, 8, 9, 19}));
  EXPECT_EQ(tok.Encode("world"), (Ids{5, 15, 17}));
  EXPECT_EQ(tok.Encode("a<tool>hello"), (Ids{20, 13}));  // 'a' has no token; <tool> always
  EXPECT_EQ(tok.Encode("hellohello"), (Ids{13, 13}));
  EXPECT_EQ(tok.Decode({13, 18, 19}), "hello world<|im_end|>");
  EXPECT_EQ(tok.stop_ids(), (Ids{19}));
  EXPECT_EQ(tok.Kind(20), TokenKind::kUserDefined);
}

TEST(HfTokenizerTest, IgnoreMergesKeepsWholeTokens) {
  // Without the "ll o" merge no merge sequence reaches "hello" (13).
  const std::string json = absl::StrReplaceAll(kJson, {{R"("ll o", )", ""}});
  absl::StatusOr<std::unique_ptr<Tokenizer>> plain = TokenizerFromHfJson(json, {});
  ASSERT_OK(plain);
  EXPECT_EQ((*plain)->Encode("hello"), (Ids{10, 11, 3}));
  // BPE's ignore_merges (Llama 3 sets it): a piece that is a token is taken whole.
  absl::StatusOr<std::unique_ptr<Tokenizer>> whole = TokenizerFromHfJson(
      absl::StrReplaceAll(json, {{R"("byte_fallback": false)",
                                  R"("byte_fallback": false, "ignore_merges": true)"}}),
      {});
  ASSERT_OK(whole);
  EXPECT_EQ((*whole)->Encode("hello"), (Ids{13}));
}

TEST(HfTokenizerTest, RejectsWhatItCannotReproduce) {
  const std::string json = kJson;
  auto with = [&](const std::string& from, const std::string& to) {
    return TokenizerFromHfJson(absl::StrReplaceAll(json, {{from, to}}), {}).status();
  };
  EXPECT_STATUS_IS(with(R"("normalizer": null)", R"("normalizer": {"type": "NFC"})"),
                   absl::StatusCode::kUnimplemented,
                   "normalizer is not supported for byte-level BPE");
  EXPECT_STATUS_IS(with(R"("type": "BPE")", R"("type": "WordPiece")"),
                   absl::StatusCode::kUnimplemented, "model.type 'WordPiece' is not supported");
  // byte_fallback makes it the SentencePiece shape, whose pre_tokenizer must be null.
  EXPECT_STATUS_IS(with(R"("byte_fallback": false)", R"("byte_fallback": true)"),
                   absl::StatusCode::kUnimplemented,
                   "pre_tokenizer 'Sequence' is not supported (SentencePiece-style BPE)");
  EXPECT_STATUS_IS(
      with(R"({"type": "Digits", "individual_digits": true},)", R"({"type": "Metaspace"},)"),
      absl::StatusCode::kUnimplemented, "pre_tokenizer Sequence[Metaspace, ByteLevel]");
  EXPECT_STATUS_IS(with(R"("Ġworld": 18)", R"("Ġworld": 25)"), absl::StatusCode::kInvalidArgument,
                   "no token has id 18 (ids must be dense)");
  EXPECT_STATUS_IS(with(R"("l d",)", R"("l q",)"), absl::StatusCode::kInvalidArgument,
                   "BPE merge #7 'l q' uses a token missing from the vocabulary");
  EXPECT_STATUS_IS(with(R"("l d",)", R"("ld",)"), absl::StatusCode::kInvalidArgument,
                   "merge 'ld' has no space");
  EXPECT_STATUS_IS(TokenizerFromHfJson("[1, 2]", {}), absl::StatusCode::kInvalidArgument,
                   "tokenizer.json: not a valid JSON object");
}

// The SentencePiece shape (Llama 2 / Mistral / TinyLlama tokenizer.json): merges become scores,
// "<0xHH>" entries byte tokens, spaces "▁" with a prefix space per plain span, BOS from the
// template. Expected ids follow the SentencePiece rules (spm_tokenizer_test); the whole
// Llama 2 vocabulary is checked against llama.cpp in model_hf_spm_vocab_test.
constexpr const char* kSpmJson = R"({
  "added_tokens": [
    {"id": 0, "content": "<unk>", "special": true},
    {"id": 1, "content": "<s>", "special": true},
    {"id": 2, "content": "</s>", "special": true}],
  "normalizer": {"type": "Sequence", "normalizers": [
    {"type": "Prepend", "prepend": "▁"},
    {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
  "pre_tokenizer": null,
  "post_processor": {"type": "TemplateProcessing", "single": [
    {"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]},
  "decoder": {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
    {"type": "ByteFallback"}, {"type": "Fuse"},
    {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
  "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "fuse_unk": true,
    "byte_fallback": true,
    "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<0x21>": 3, "<0xC3>": 4, "<0xA9>": 5,
              "▁": 6, "h": 7, "i": 8, "▁h": 9, "▁hi": 10, "hi": 11},
    "merges": ["▁ h", "▁h i", "h i"]}
})";

TEST(HfTokenizerTest, SentencePieceShapeRunsTheSentencePiecePath) {
  HfSpecialIds ids;
  ids.bos_id = 1;
  ids.eos_id = 2;
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = TokenizerFromHfJson(kSpmJson, ids);
  ASSERT_OK(t);
  const Tokenizer& tok = **t;
  EXPECT_EQ(tok.model(), TokenizerModel::kSentencePiece);
  EXPECT_TRUE(tok.add_bos());
  EXPECT_EQ(tok.Kind(3), TokenKind::kByte);
  // "▁hi" wins over "hi" (its merge ranks first); "é" has no token: its two byte tokens.
  EXPECT_EQ(tok.Encode("hi hi!é"), (Ids{1, 10, 10, 3, 4, 5}));
  EXPECT_EQ(tok.Encode("hi</s>hi", /*parse_special=*/true, /*with_bos=*/false),
            (Ids{10, 2, 10}));  // the prefix space again after a special token
  EXPECT_EQ(tok.Decode({1, 10, 10, 3, 4, 5}, /*skip_special=*/true), " hi hi!é");
  EXPECT_EQ(tok.Decode({10, 10}), "hi hi");

  const std::string json = kSpmJson;
  auto with = [&](const std::string& from, const std::string& to) {
    return TokenizerFromHfJson(absl::StrReplaceAll(json, {{from, to}}), ids).status();
  };
  // The non-legacy shape: Metaspace instead of the normalizer; no prefix space after a special
  // token (prepend_scheme "first") nor before a leading space.
  const std::string metaspace = absl::StrReplaceAll(
      json,
      {{R"("pre_tokenizer": null)", R"("pre_tokenizer": {"type": "Metaspace", "replacement": "▁", )"
                                    R"("prepend_scheme": "first", "split": false})"},
       {R"({"type": "Sequence", "normalizers": [
    {"type": "Prepend", "prepend": "▁"},
    {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]})",
        "null"}});
  absl::StatusOr<std::unique_ptr<Tokenizer>> m = TokenizerFromHfJson(metaspace, ids);
  ASSERT_OK(m);
  // Expected ids: HF tokenizers 0.23.3 on this JSON.
  EXPECT_EQ((*m)->Encode("hi</s>hi", true, false), (Ids{10, 2, 11}));
  EXPECT_EQ((*m)->Encode(" hi</s> hi", true, false), (Ids{10, 2, 10}));
  EXPECT_EQ((*m)->Encode("</s>hi", true, false), (Ids{2, 11}));
  EXPECT_EQ((*m)->Encode(" hi", false, false), (Ids{10}));
  absl::StatusOr<std::unique_ptr<Tokenizer>> always =
      TokenizerFromHfJson(absl::StrReplaceAll(metaspace, {{R"("first")", R"("always")"}}), ids);
  ASSERT_OK(always);
  EXPECT_EQ((*always)->Encode("hi</s>hi", true, false), (Ids{10, 2, 10}));
  EXPECT_EQ((*always)->Encode("</s>hi", true, false), (Ids{2, 10}));
  EXPECT_EQ((*always)->Encode(" hi</s> hi", true, false), (Ids{10, 2, 10}));
  auto metaspace_with = [&](const std::string& from, const std::string& to) {
    return TokenizerFromHfJson(absl::StrReplaceAll(metaspace, {{from, to}}), ids).status();
  };
  EXPECT_STATUS_IS(metaspace_with(R"("split": false)", R"("split": true)"),
                   absl::StatusCode::kUnimplemented, "pre_tokenizer Metaspace split true");
  EXPECT_STATUS_IS(metaspace_with(R"("first")", R"("never")"), absl::StatusCode::kUnimplemented,
                   "pre_tokenizer Metaspace prepend_scheme 'never' is not supported");
  EXPECT_STATUS_IS(with(R"("pre_tokenizer": null)", R"("pre_tokenizer": {"type": "Whitespace"})"),
                   absl::StatusCode::kUnimplemented, "pre_tokenizer 'Whitespace' is not supported");
  EXPECT_STATUS_IS(with(R"({"type": "Prepend", "prepend": "▁"},)", ""),
                   absl::StatusCode::kUnimplemented, "normalizer Sequence[Replace]");
  EXPECT_STATUS_IS(with(R"({"type": "Fuse"},)", ""), absl::StatusCode::kUnimplemented,
                   "decoder Sequence[Replace, ByteFallback, Strip]");
  EXPECT_STATUS_IS(with(R"("dropout": null)", R"("dropout": 0.1)"),
                   absl::StatusCode::kUnimplemented, "model.dropout 0.1 is not supported");
  EXPECT_STATUS_IS(with(R"("type": "BPE")", R"("type": "Unigram")"),
                   absl::StatusCode::kUnimplemented, "model.type 'Unigram' is not supported");
  EXPECT_STATUS_IS(with(R"("h i"])", R"("h i", "i h"])"), absl::StatusCode::kInvalidArgument,
                   "merge 'i h' makes no vocabulary token");
}

// A Llama 2 / TinyLlama directory: BOS/EOS texts from tokenizer_config.json; the template adds
// BOS unless tokenizer_config.json's add_bos_token says otherwise (transformers rebuilds the
// template from it).
TEST(HfTokenizerTest, SentencePieceDirectoryTakesBosFromTemplateOrConfig) {
  const ScopedTempDir dir("hf_spm");
  WriteFile(dir.path() + "/tokenizer.json", kSpmJson);
  WriteFile(dir.path() + "/tokenizer_config.json",
            R"({"bos_token": "<s>", "eos_token": {"content": "</s>"}})");
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = TokenizerFromHfDirectory(dir.path());
  ASSERT_OK(t);
  EXPECT_EQ((*t)->bos_id(), 1);
  EXPECT_EQ((*t)->eos_id(), 2);
  EXPECT_EQ((*t)->Encode("hi"), (Ids{1, 10}));
  WriteFile(dir.path() + "/tokenizer_config.json",
            R"({"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": false})");
  t = TokenizerFromHfDirectory(dir.path());
  ASSERT_OK(t);
  EXPECT_EQ((*t)->Encode("hi"), (Ids{10}));
}

TEST(HfTokenizerTest, DirectoryTakesIdsFromConfigFiles) {
  const ScopedTempDir dir("hf_tok");
  WriteFile(dir.path() + "/tokenizer.json", kJson);
  WriteFile(dir.path() + "/config.json", R"({"bos_token_id": 0, "eos_token_id": [19, 20]})");
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = TokenizerFromHfDirectory(dir.path());
  ASSERT_OK(t);
  EXPECT_EQ((*t)->bos_id(), 0);
  EXPECT_EQ((*t)->eos_id(), 19);
  // Without config.json, tokenizer_config.json names the EOS by its text.
  const ScopedTempDir dir2("hf_tok2");
  WriteFile(dir2.path() + "/tokenizer.json", kJson);
  WriteFile(dir2.path() + "/tokenizer_config.json",
            R"({"eos_token": {"content": "<|im_end|>"}, "add_bos_token": false})");
  t = TokenizerFromHfDirectory(dir2.path());
  ASSERT_OK(t);
  EXPECT_EQ((*t)->eos_id(), 19);
  EXPECT_FALSE((*t)->bos_id().has_value());
  const ScopedTempDir empty("hf_tok3");
  EXPECT_STATUS_IS(TokenizerFromHfDirectory(empty.path()), absl::StatusCode::kNotFound,
                   "tokenizer.json");
}

// Every eos_token_id of config.json and generation_config.json ends generation (Llama 3.1's
// generation_config lists <|end_of_text|>, <|eom_id|> and <|eot_id|>); the first of config.json's
// list is the EOS.
TEST(HfTokenizerTest, EveryDeclaredEosIdIsAStop) {
  const ScopedTempDir dir("hf_tok_stops");
  WriteFile(dir.path() + "/tokenizer.json", kJson);
  WriteFile(dir.path() + "/config.json", R"({"eos_token_id": [19, 17]})");
  WriteFile(dir.path() + "/generation_config.json", R"({"eos_token_id": [18, 19]})");
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = TokenizerFromHfDirectory(dir.path());
  ASSERT_OK(t);
  EXPECT_EQ((*t)->eos_id(), 19);
  EXPECT_THAT((*t)->stop_ids(), ::testing::UnorderedElementsAre(19, 17, 18));
  WriteFile(dir.path() + "/generation_config.json", R"({"eos_token_id": "x"})");
  EXPECT_STATUS_IS(TokenizerFromHfDirectory(dir.path()), absl::StatusCode::kInvalidArgument,
                   "generation_config.json: eos_token_id");
}

}  // namespace
}  // namespace tandem
