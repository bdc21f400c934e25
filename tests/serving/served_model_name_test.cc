// The served model name: the default from the model path, and the flag with its deprecated alias.
#include "serving/served_model_name.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

TEST(ServedModelNameTest, DefaultIsTheFileStemOrTheDirectoryName) {
  EXPECT_EQ(DefaultServedModelName("/models/SmolLM2-135M-Instruct.Q4_1.gguf"),
            "SmolLM2-135M-Instruct.Q4_1");
  EXPECT_EQ(DefaultServedModelName("Llama-3.2-1B.Q4_K_M.GGUF"), "Llama-3.2-1B.Q4_K_M");
  // A HF checkpoint directory keeps the dots of its name; trailing slashes do not count.
  EXPECT_EQ(DefaultServedModelName("ckpt/Qwen2.5-0.5B-Instruct/"), "Qwen2.5-0.5B-Instruct");
  EXPECT_EQ(DefaultServedModelName("ckpt/Qwen2.5-0.5B-Instruct"), "Qwen2.5-0.5B-Instruct");
  EXPECT_EQ(DefaultServedModelName("/data/my model\tv2.gguf"), "my-model-v2");
  EXPECT_EQ(DefaultServedModelName(".gguf"), ".gguf");  // nothing left to name it by
}

TEST(ServedModelNameTest, FlagOrDeprecatedAliasElseTheDefault) {
  EXPECT_EQ(*ResolveServedModelName("", "", "/m/tiny.gguf"), "tiny");
  EXPECT_EQ(*ResolveServedModelName("smol", "", "/m/tiny.gguf"), "smol");
  EXPECT_EQ(*ResolveServedModelName("", "old-name", "/m/tiny.gguf"), "old-name");
  EXPECT_EQ(*ResolveServedModelName("same", "same", "/m/tiny.gguf"), "same");
  const absl::StatusOr<std::string> both = ResolveServedModelName("a", "b", "/m/tiny.gguf");
  EXPECT_EQ(both.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(both.status().message()),
              ::testing::HasSubstr("--served_model_name 'a' and --model_name 'b'"));
}

}  // namespace
}  // namespace tandem
