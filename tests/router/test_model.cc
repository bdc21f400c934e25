#include "tests/router/test_model.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/format/gguf_file.h"
#include "model/format/gguf_writer.h"
#include "model/tokenizer/byte_level.h"
#include "model/tokenizer/tokenizer.h"

namespace tandem::testing_router {

std::unique_ptr<ServedModel> MakeTestModel(int64_t context_length, const std::string& chat_template,
                                           bool add_bos) {
  std::vector<std::string> tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  std::vector<int32_t> types(3, static_cast<int32_t>(TokenKind::kControl));
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(BytesToByteLevel(std::string(1, static_cast<char>(b))));
    types.push_back(static_cast<int32_t>(TokenKind::kNormal));
  }
  tokens.push_back("he");
  types.push_back(static_cast<int32_t>(TokenKind::kNormal));

  GgufWriter writer;
  writer.Set("general.architecture", GgufValue::String("llama"));
  writer.Set("general.name", GgufValue::String(kTestModelName));
  writer.Set("llama.context_length", GgufValue::Uint32(static_cast<uint32_t>(context_length)));
  writer.Set("tokenizer.ggml.model", GgufValue::String("gpt2"));
  writer.Set("tokenizer.ggml.pre", GgufValue::String("smollm"));
  writer.Set("tokenizer.ggml.tokens", GgufValue::StringArray(tokens));
  writer.Set("tokenizer.ggml.token_type", GgufValue::Int32Array(types));
  writer.Set("tokenizer.ggml.merges", GgufValue::StringArray({"h e"}));
  writer.Set("tokenizer.ggml.bos_token_id", GgufValue::Uint32(1));
  writer.Set("tokenizer.ggml.eos_token_id", GgufValue::Uint32(2));
  if (add_bos) writer.Set("tokenizer.ggml.add_bos_token", GgufValue::Bool(true));
  if (!chat_template.empty()) {
    writer.Set("tokenizer.chat_template", GgufValue::String(chat_template));
  }
  absl::StatusOr<std::unique_ptr<GgufFile>> file =
      GgufFile::FromBytes(writer.Serialize(), "tiny-test.gguf");
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return nullptr;
  absl::StatusOr<std::unique_ptr<ServedModel>> model = ServedModel::FromGguf(**file, "");
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return nullptr;
  return *std::move(model);
}

}  // namespace tandem::testing_router
