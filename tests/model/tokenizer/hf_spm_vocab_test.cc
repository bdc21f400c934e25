// The SentencePiece shape of an HF tokenizer.json (model/tokenizer/hf_spm.h) against llama.cpp's
// reference tokenisations of the Llama 2 / Mistral / TinyLlama vocabulary (ggml-vocab-llama-spm,
// tests/model/tokenizer/llamacpp_cases.h). The test writes the tokenizer.json transformers'
// LlamaConverter makes from that vocabulary — vocab, merges from SentencePieceExtractor (every
// split of every piece into two vocabulary pieces, ordered by the piece's score), the special
// tokens as added_tokens, the Prepend/Replace normalizer, the ByteFallback decoder and the
// "<s> $A" template — loads it through TokenizerFromHfJson and requires every reference line to
// encode to llama.cpp's ids (and to the GGUF path's), decode back, and chat-style text with
// control tokens to tokenize as the GGUF path does. Prints
// RESULT hf_spm_reference_lines_matched=<matched>/<total>.
//
// The non-legacy shape (no normalizer, Metaspace pre-tokenizer with prepend_scheme "first")
// tokenizes differently (no prefix space after a special token or before a leading space), so
// llama.cpp is no oracle for it: its ids for the same inputs come from HF `tokenizers`
// (testdata/hf_metaspace_llama_spm.txt, written by hf_metaspace_reference.py from the same
// vocabulary built the same way).
#include <algorithm>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "model/format/gguf_file.h"
#include "model/format/json_value.h"
#include "model/tokenizer/gguf_tokenizer.h"
#include "model/tokenizer/hf_tokenizer.h"
#include "tests/model/format/status_matchers.h"
#include "tests/model/tokenizer/llamacpp_cases.h"

namespace tandem {
namespace {

using testing::Case;
using testing::DataDir;
using testing::Ids;

// Code-point boundaries of s (Python's str indexing, which the converter splits by).
std::vector<size_t> CharStarts(const std::string& s) {
  std::vector<size_t> starts;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<uint8_t>(s[i]) & 0xC0) != 0x80) starts.push_back(i);
  }
  return starts;
}

// transformers' LlamaConverter on a SentencePiece vocabulary given as GGUF metadata: legacy
// (Prepend/Replace normalizer) or not (Metaspace pre-tokenizer, prepend_scheme "first").
std::string HfJsonFromGguf(const GgufFile& f, bool metaspace = false) {
  const absl::Span<const std::string> tokens = *f.GetStringArray("tokenizer.ggml.tokens");
  const std::vector<float> scores = *f.GetFloatArray("tokenizer.ggml.scores");
  const std::vector<int64_t> types = *f.GetIntArray("tokenizer.ggml.token_type");
  std::map<std::string, int64_t> vocab;
  nlohmann::json vocab_json = nlohmann::json::object();
  for (size_t i = 0; i < tokens.size(); ++i) {
    vocab.emplace(tokens[i], static_cast<int64_t>(i));
    vocab_json[tokens[i]] = i;
  }
  // SentencePieceExtractor.extract(vocab_scores): per piece, its splits sorted by the pieces'
  // ids; then all merges stably sorted by the piece's score, highest first.
  std::vector<std::tuple<std::string, std::string, float>> merges;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string& piece = tokens[i];
    std::vector<std::tuple<std::string, std::string, float>> local;
    const std::vector<size_t> starts = CharStarts(piece);
    for (size_t k = 1; k < starts.size(); ++k) {
      std::string l = piece.substr(0, starts[k]), r = piece.substr(starts[k]);
      if (vocab.count(l) != 0 && vocab.count(r) != 0) local.emplace_back(l, r, scores[i]);
    }
    std::sort(local.begin(), local.end(), [&](const auto& a, const auto& b) {
      return std::pair(vocab[std::get<0>(a)], vocab[std::get<1>(a)]) <
             std::pair(vocab[std::get<0>(b)], vocab[std::get<1>(b)]);
    });
    merges.insert(merges.end(), local.begin(), local.end());
  }
  std::stable_sort(merges.begin(), merges.end(),
                   [](const auto& a, const auto& b) { return std::get<2>(a) > std::get<2>(b); });
  nlohmann::json merges_json = nlohmann::json::array();
  for (const auto& [l, r, s] : merges) merges_json.push_back(l + " " + r);
  nlohmann::json added = nlohmann::json::array();
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (types[i] == 2 || types[i] == 3 || types[i] == 4) {
      added.push_back({{"id", i},
                       {"content", tokens[i]},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", types[i] == 4},
                       {"special", types[i] != 4}});
    }
  }
  const std::string space = "\xE2\x96\x81";
  nlohmann::json j = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", space}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", space}}}}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "Replace"}, {"pattern", {{"String", space}}}, {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}},
          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", "<unk>"},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", true},
        {"byte_fallback", true},
        {"vocab", vocab_json},
        {"merges", merges_json}}}};
  if (metaspace) {
    j["normalizer"] = nullptr;
    j["pre_tokenizer"] = {{"type", "Metaspace"},
                          {"replacement", space},
                          {"prepend_scheme", "first"},
                          {"split", false}};
  }
  return j.dump();
}

// testdata/hf_metaspace_llama_spm.txt: "<i>: ids" per reference input, "chat <i>: ids".
std::map<std::string, Ids> ReadHfIds() {
  const std::string path =
      std::string(TANDEM_SOURCE_DIR) + "/tests/model/tokenizer/testdata/hf_metaspace_llama_spm.txt";
  std::map<std::string, Ids> out;
  for (const absl::string_view line : absl::StrSplit(testing::ReadAll(path), '\n')) {
    if (line.empty() || line[0] == '#') continue;
    const size_t colon = line.find(':');
    Ids& ids = out[std::string(line.substr(0, colon))];
    for (const absl::string_view t :
         absl::StrSplit(line.substr(colon + 1), ' ', absl::SkipEmpty())) {
      int32_t id = 0;
      EXPECT_TRUE(absl::SimpleAtoi(t, &id)) << path << ": " << line;
      ids.push_back(id);
    }
  }
  EXPECT_FALSE(out.empty()) << path;
  return out;
}

class HfSpmVocabTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (DataDir().empty()) {
      GTEST_SKIP() << "TANDEM_LLAMACPP_DATA is not set; run deploy/fetch-llamacpp-data.sh and "
                      "point it at the directory it prints (deploy/test.sh does this)";
    }
  }
};

TEST_F(HfSpmVocabTest, LlamaSpmTokenizerJsonMatchesEveryReferenceLine) {
  const std::string gguf_path = DataDir() + "/ggml-vocab-llama-spm.gguf";
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(gguf_path);
  ASSERT_OK(file);
  absl::StatusOr<std::unique_ptr<Tokenizer>> gguf = TokenizerFromGguf(**file);
  ASSERT_OK(gguf);
  HfSpecialIds ids;
  ids.bos_id = 1;  // config.json of Llama 2 / TinyLlama
  ids.eos_id = 2;
  absl::StatusOr<std::unique_ptr<Tokenizer>> hf = TokenizerFromHfJson(HfJsonFromGguf(**file), ids);
  ASSERT_OK(hf);
  EXPECT_EQ((*hf)->vocab_size(), (*gguf)->vocab_size());
  EXPECT_EQ((*hf)->model(), TokenizerModel::kSentencePiece);
  EXPECT_TRUE((*hf)->add_bos());  // from the "<s> $A" template
  const std::vector<Case> cases = testing::ReadCases(gguf_path);
  ASSERT_FALSE(cases.empty());
  int matched = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const Ids got = (*hf)->Encode(c.input, /*parse_special=*/false, /*with_bos=*/false);
    const bool ok = got == c.ids && (*hf)->Decode(got) == c.input &&
                    got == (*gguf)->Encode(c.input, false, false);
    EXPECT_TRUE(ok) << "input #" << i << ": got " << absl::StrJoin(got, " ") << ", want "
                    << absl::StrJoin(c.ids, " ");
    matched += ok;
  }
  std::cout << "RESULT hf_spm_reference_lines_matched=" << matched << "/" << cases.size() << "\n";
  // Chat-style text: control tokens parsed, a prefix space after each, BOS, and skip_special.
  for (const char* text : {"<s>[INST] Hi there [/INST] Hello!</s>", "  two spaces</s>\n<s>x",
                           "\xF0\x9F\xA6\x99 llama \xE4\xBD\xA0\xE5\xA5\xBD"}) {
    SCOPED_TRACE(text);
    for (const bool parse_special : {false, true}) {
      const Ids want = (*gguf)->Encode(text, parse_special, true);
      EXPECT_EQ((*hf)->Encode(text, parse_special, true), want);
      EXPECT_EQ((*hf)->Decode(want, true), (*gguf)->Decode(want, true));
    }
  }
}

TEST_F(HfSpmVocabTest, MetaspaceTokenizerJsonMatchesHfTokenizers) {
  const std::string gguf_path = DataDir() + "/ggml-vocab-llama-spm.gguf";
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(gguf_path);
  ASSERT_OK(file);
  HfSpecialIds ids;
  ids.bos_id = 1;
  ids.eos_id = 2;
  absl::StatusOr<std::unique_ptr<Tokenizer>> hf =
      TokenizerFromHfJson(HfJsonFromGguf(**file, /*metaspace=*/true), ids);
  ASSERT_OK(hf);
  const std::map<std::string, Ids> want = ReadHfIds();
  const std::vector<Case> cases = testing::ReadCases(gguf_path);
  ASSERT_FALSE(cases.empty());
  int matched = 0, total = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto it = want.find(std::to_string(i));
    ASSERT_NE(it, want.end()) << "no HF ids for input #" << i;
    const Ids got = (*hf)->Encode(cases[i].input, /*parse_special=*/false, /*with_bos=*/false);
    EXPECT_EQ(got, it->second) << "input #" << i;
    matched += got == it->second;
    ++total;
  }
  const char* const kChat[] = {"<s>[INST] Hi there [/INST] Hello!</s>", "  two spaces</s>\n<s>x",
                               " leading space", "\xF0\x9F\xA6\x99 llama \xE4\xBD\xA0\xE5\xA5\xBD"};
  for (size_t i = 0; i < std::size(kChat); ++i) {
    const auto it = want.find(absl::StrCat("chat ", i));
    ASSERT_NE(it, want.end()) << "no HF ids for chat #" << i;
    const Ids got = (*hf)->Encode(kChat[i], /*parse_special=*/true, /*with_bos=*/true);
    EXPECT_EQ(got, it->second) << "chat #" << i;
    matched += got == it->second;
    ++total;
  }
  std::cout << "RESULT hf_metaspace_lines_matched_hf_tokenizers=" << matched << "/" << total
            << "\n";
}

}  // namespace
}  // namespace tandem
