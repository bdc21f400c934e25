#include "tests/fuzz/fuzz_model.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "absl/strings/str_format.h"
#include "model/format/gguf_file.h"
#include "model/format/gguf_writer.h"
#include "model/tokenizer/gguf_tokenizer.h"
#include "model/tools/synthetic_vocab.h"

namespace tandem::fuzz {
namespace {

[[noreturn]] void Die(const absl::Status& status, const char* what) {
  std::fprintf(stderr, "fuzz_model: %s: %s\n", what, status.ToString().c_str());
  std::abort();
}

// SmolLM2's template: a default system message when the conversation has none.
constexpr char kChatTemplate[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}";

}  // namespace

std::string TokenizerGgufImage() {
  absl::StatusOr<SyntheticVocab> vocab = BuildSyntheticVocab(kFuzzVocab);
  if (!vocab.ok()) Die(vocab.status(), "BuildSyntheticVocab");
  std::vector<int32_t> types;
  for (TokenKind k : vocab->kinds) types.push_back(static_cast<int32_t>(k));
  std::vector<std::string> merges;
  for (const auto& [left, right] : vocab->merges) merges.push_back(left + " " + right);
  GgufWriter writer;
  writer.Set("general.architecture", GgufValue::String("llama"));
  writer.Set("general.name", GgufValue::String(kFuzzModelName));
  writer.Set("llama.context_length", GgufValue::Uint32(static_cast<uint32_t>(kFuzzContext)));
  writer.Set("tokenizer.ggml.model", GgufValue::String("gpt2"));
  writer.Set("tokenizer.ggml.pre", GgufValue::String("smollm"));
  writer.Set("tokenizer.ggml.tokens", GgufValue::StringArray(vocab->tokens));
  writer.Set("tokenizer.ggml.token_type", GgufValue::Int32Array(types));
  writer.Set("tokenizer.ggml.merges", GgufValue::StringArray(merges));
  writer.Set("tokenizer.ggml.bos_token_id", GgufValue::Uint32(1));
  writer.Set("tokenizer.ggml.eos_token_id", GgufValue::Uint32(2));
  writer.Set("tokenizer.chat_template", GgufValue::String(kChatTemplate));
  return writer.Serialize();
}

const ServedModel& FuzzServedModel() {
  static const ServedModel* const model = [] {
    absl::StatusOr<std::unique_ptr<GgufFile>> file =
        GgufFile::FromBytes(TokenizerGgufImage(), "fuzz-model.gguf");
    if (!file.ok()) Die(file.status(), "GgufFile::FromBytes");
    absl::StatusOr<std::unique_ptr<ServedModel>> served = ServedModel::FromGguf(**file, "");
    if (!served.ok()) Die(served.status(), "ServedModel::FromGguf");
    return served->release();
  }();
  return *model;
}

std::string SpmTokenizerGgufImage() {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>", "<|user|>"};
  std::vector<int32_t> types = {2, 3, 3, 4};
  std::vector<float> scores = {0, 0, 0, 0};
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(absl::StrFormat("<0x%02X>", b));
    types.push_back(6);
    scores.push_back(0);
  }
  // Pieces that merge in several orders: scores decide.
  const char* const pieces[] = {"▁",      "e",  "h",  "l",    "o",      "w",    "r",     "d",
                                "1",      "2",  "he", "ll",   "lo",     "hell", "hello", "▁h",
                                "▁hello", "▁w", "or", "▁wor", "▁world", "12",   "▁▁"};
  float score = -1;
  for (const char* p : pieces) {
    tokens.push_back(p);
    types.push_back(1);
    scores.push_back(score);
    score -= 0.5f;
  }
  GgufWriter writer;
  writer.Set("general.architecture", GgufValue::String("llama"));
  writer.Set("general.name", GgufValue::String("fuzz-phi3"));
  writer.Set("llama.context_length", GgufValue::Uint32(static_cast<uint32_t>(kFuzzContext)));
  writer.Set("tokenizer.ggml.model", GgufValue::String("llama"));
  writer.Set("tokenizer.ggml.tokens", GgufValue::StringArray(tokens));
  writer.Set("tokenizer.ggml.token_type", GgufValue::Int32Array(types));
  writer.Set("tokenizer.ggml.scores", GgufValue::Float32Array(scores));
  writer.Set("tokenizer.ggml.add_eos_token", GgufValue::Bool(true));
  return writer.Serialize();
}

const Tokenizer& FuzzSpmTokenizer() {
  static const Tokenizer* const tokenizer = [] {
    absl::StatusOr<std::unique_ptr<GgufFile>> file =
        GgufFile::FromBytes(SpmTokenizerGgufImage(), "fuzz-spm.gguf");
    if (!file.ok()) Die(file.status(), "GgufFile::FromBytes");
    absl::StatusOr<std::unique_ptr<Tokenizer>> t = TokenizerFromGguf(**file);
    if (!t.ok()) Die(t.status(), "TokenizerFromGguf");
    return t->release();
  }();
  return *tokenizer;
}

}  // namespace tandem::fuzz
