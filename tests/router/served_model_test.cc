#include "router/served_model.h"

#include <sys/stat.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/format/gguf_file.h"
#include "model/format/gguf_writer.h"
#include "tests/model/format/safetensors_test_util.h"
#include "tests/router/test_model.h"

namespace tandem {
namespace {

using ::testing::ElementsAre;
using testing_router::ByteToken;
using testing_router::MakeTestModel;

TEST(ServedModelTest, LimitsComeFromMetadata) {
  const std::unique_ptr<ServedModel> model = MakeTestModel(64);
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->limits().name, "tiny-test");
  EXPECT_EQ(model->limits().vocab_size, testing_router::kTestVocab);
  EXPECT_EQ(model->limits().context_length, 64);
  EXPECT_THAT(model->tokenizer().stop_ids(), ::testing::UnorderedElementsAre(0, 2));
}

TEST(ServedModelTest, TokenizesEachPromptKind) {
  const std::unique_ptr<ServedModel> model = MakeTestModel(64);
  ASSERT_NE(model, nullptr);
  PromptInput text;
  text.kind = PromptInput::Kind::kText;
  text.text = "hex<|im_end|>";
  EXPECT_THAT(*model->Tokenize(text), ElementsAre(259, ByteToken('x'), 2));  // specials parsed

  // Without a chat template: the ChatML fallback.
  EXPECT_FALSE(model->chat().uses_template());
  PromptInput chat;
  chat.kind = PromptInput::Kind::kChat;
  chat.chat = {{"user", "hi"}};
  // <|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n
  const std::vector<int32_t> ids = *model->Tokenize(chat);
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(model->tokenizer().Decode(ids),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");

  PromptInput raw;
  raw.kind = PromptInput::Kind::kTokenIds;
  raw.token_ids = {7, 8, 9};
  EXPECT_THAT(*model->Tokenize(raw), ElementsAre(7, 8, 9));
}

// SmolLM2's shape: ChatML with a default system message when the conversation has none.
constexpr char kTinyTemplate[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are Tiny.<|im_end|>\n' }}{% endif %}{{ '<|im_start|>' + "
    "message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

TEST(ServedModelTest, ChatIsRenderedWithTheModelsTemplate) {
  const std::unique_ptr<ServedModel> model = MakeTestModel(256, kTinyTemplate);
  ASSERT_NE(model, nullptr);
  EXPECT_TRUE(model->chat().uses_template());
  PromptInput chat;
  chat.kind = PromptInput::Kind::kChat;
  chat.chat = {{"user", "hi"}};
  EXPECT_EQ(model->tokenizer().Decode(*model->Tokenize(chat)),
            "<|im_start|>system\nYou are Tiny.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
            "<|im_start|>assistant\n");
  chat.chat.insert(chat.chat.begin(), ChatMessage{"system", "Be brief."});
  EXPECT_EQ(model->tokenizer().Decode(*model->Tokenize(chat)),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
            "<|im_start|>assistant\n");
}

// add_generation_prompt false: no assistant turn; continue_final_message: the last message left
// open (transformers' cut, the message's trailing whitespace kept when the template keeps it).
TEST(ServedModelTest, GenerationPromptAndContinuingTheFinalMessage) {
  const std::unique_ptr<ServedModel> model = MakeTestModel(256, kTinyTemplate);
  ASSERT_NE(model, nullptr);
  PromptInput chat;
  chat.kind = PromptInput::Kind::kChat;
  chat.chat = {{"user", "hi"}};
  chat.add_generation_prompt = false;
  EXPECT_EQ(model->tokenizer().Decode(*model->Tokenize(chat)),
            "<|im_start|>system\nYou are Tiny.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n");
  chat.chat.push_back({"assistant", "Sure, "});
  chat.continue_final_message = true;
  EXPECT_EQ(model->tokenizer().Decode(*model->Tokenize(chat)),
            "<|im_start|>system\nYou are Tiny.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
            "<|im_start|>assistant\nSure, ");
  EXPECT_EQ(*CutAfterFinalMessage("<a> x y </a>", " x y\n"), "<a> x y");  // trimmed by the template
  const absl::StatusOr<std::string> missing = CutAfterFinalMessage("<a>x</a>", "gone");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(missing.status().message()),
              ::testing::HasSubstr("continue_final_message"));
}

// The template writes BOS itself ({{ bos_token }}): the tokenizer adds none on top, even for a
// model that asks for BOS in front of text prompts; the marker becomes the BOS id.
TEST(ServedModelTest, TemplateBosIsTheOnlyBos) {
  const std::unique_ptr<ServedModel> model = MakeTestModel(
      256, "{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}",
      /*add_bos=*/true);
  ASSERT_NE(model, nullptr);
  PromptInput chat;
  chat.kind = PromptInput::Kind::kChat;
  chat.chat = {{"user", "hi"}};
  EXPECT_THAT(*model->Tokenize(chat), ElementsAre(1, ByteToken('h'), ByteToken('i'), 2));
}

TEST(ServedModelTest, TemplateRefusalsAreInvalidArgumentWithTheTemplatesMessage) {
  const std::unique_ptr<ServedModel> model = MakeTestModel(
      256,
      "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') "
      "}}{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}");
  ASSERT_NE(model, nullptr);
  PromptInput chat;
  chat.kind = PromptInput::Kind::kChat;
  chat.chat = {{"system", "x"}, {"user", "hi"}};
  const absl::StatusOr<std::vector<int32_t>> ids = model->Tokenize(chat);
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ids.status().message(), "System role not supported");
}

TEST(ServedModelTest, UnsupportedTemplateIsRefusedAtLoadNamingTheConstruct) {
  GgufWriter writer;
  writer.Set("general.architecture", GgufValue::String("llama"));
  writer.Set("general.name", GgufValue::String("m"));
  writer.Set("llama.context_length", GgufValue::Uint32(16));
  writer.Set("tokenizer.ggml.model", GgufValue::String("gpt2"));
  writer.Set("tokenizer.ggml.pre", GgufValue::String("gpt-2"));
  writer.Set("tokenizer.ggml.tokens", GgufValue::StringArray({"a", "b"}));
  writer.Set("tokenizer.ggml.merges", GgufValue::StringArray({}));
  writer.Set("tokenizer.chat_template",
             GgufValue::String("{% for m in messages %}\n{{ m.content | from_json }}{% endfor %}"));
  absl::StatusOr<std::unique_ptr<GgufFile>> file =
      GgufFile::FromBytes(writer.Serialize(), "m.gguf");
  ASSERT_TRUE(file.ok()) << file.status();
  const absl::StatusOr<std::unique_ptr<ServedModel>> model = ServedModel::FromGguf(**file, "");
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(model.status().message()),
              ::testing::HasSubstr("unsupported filter 'from_json' at line 2"));
  EXPECT_THAT(std::string(model.status().message()), ::testing::HasSubstr("m.gguf"));
}

TEST(ServedModelTest, ExplicitNameWinsAndMissingContextIsNotFound) {
  GgufWriter writer;
  writer.Set("general.architecture", GgufValue::String("llama"));
  writer.Set("tokenizer.ggml.model", GgufValue::String("gpt2"));
  writer.Set("tokenizer.ggml.pre", GgufValue::String("gpt-2"));
  writer.Set("tokenizer.ggml.tokens", GgufValue::StringArray({"a", "b"}));
  writer.Set("tokenizer.ggml.merges", GgufValue::StringArray({}));
  absl::StatusOr<std::unique_ptr<GgufFile>> file =
      GgufFile::FromBytes(writer.Serialize(), "m.gguf");
  ASSERT_TRUE(file.ok()) << file.status();
  const absl::StatusOr<std::unique_ptr<ServedModel>> missing = ServedModel::FromGguf(**file, "x");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()),
              ::testing::HasSubstr("llama.context_length"));

  writer.Set("llama.context_length", GgufValue::Uint32(16));
  file = GgufFile::FromBytes(writer.Serialize(), "m.gguf");
  ASSERT_TRUE(file.ok()) << file.status();
  const absl::StatusOr<std::unique_ptr<ServedModel>> unnamed = ServedModel::FromGguf(**file, "");
  EXPECT_EQ(unnamed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(unnamed.status().message(),
            "m.gguf has no general.name; give the served name explicitly");
  const absl::StatusOr<std::unique_ptr<ServedModel>> named = ServedModel::FromGguf(**file, "mine");
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ((*named)->limits().name, "mine");
  EXPECT_EQ((*named)->limits().context_length, 16);
}

// A HF checkpoint directory: limits from config.json, the tokenizer from tokenizer.json, the
// chat template from tokenizer_config.json (chat_template.jinja wins; --chat_template FILE
// overrides both); no weights are needed beyond the headers.
TEST(ServedModelTest, HfDirectoryServesWithItsTokenizerJson) {
  const ::tandem::testing::ScopedTempDir tmp("served_hf");
  const std::string dir = tmp.path() + "/tiny-hf";
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  const auto hf = ::tandem::testing::MakeTinyHf(/*tied=*/true);
  ::tandem::testing::WriteFile(dir + "/config.json", hf.config_json);
  ::tandem::testing::WriteFile(dir + "/model.safetensors",
                               ::tandem::testing::SafetensorsImage(hf.tensors));

  const absl::StatusOr<std::unique_ptr<ServedModel>> no_tokenizer = ServedModel::Load(dir, "");
  EXPECT_EQ(no_tokenizer.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(no_tokenizer.status().message()), ::testing::HasSubstr("tokenizer.json"));

  ::tandem::testing::WriteFile(dir + "/tokenizer.json", R"({
    "added_tokens": [{"id": 12, "content": "<|im_end|>", "special": true},
                     {"id": 13, "content": "<|im_start|>", "special": true}],
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {"h": 0, "i": 1, "Ċ": 2, "s": 3, "y": 4, "t": 5, "e": 6,
                                       "m": 7, "u": 8, "r": 9, "a": 10, "n": 11},
              "merges": []}})");
  ::tandem::testing::WriteFile(dir + "/tokenizer_config.json", R"({"eos_token": "<|im_end|>",
    "chat_template": "{% if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nhi<|im_end|>\n' }}{% endif %}{% for m in messages %}{{ '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"})");
  const absl::StatusOr<std::unique_ptr<ServedModel>> model = ServedModel::Load(dir, "");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->limits().name, "tiny-hf");
  EXPECT_EQ((*model)->limits().vocab_size, 14);
  EXPECT_EQ((*model)->limits().context_length, 256);
  PromptInput chat;
  chat.kind = PromptInput::Kind::kChat;
  chat.chat = {{"user", "hi"}};
  EXPECT_EQ((*model)->tokenizer().Decode(*(*model)->Tokenize(chat)),
            "<|im_start|>system\nhi<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
            "<|im_start|>assistant\n");
  const absl::StatusOr<std::unique_ptr<ServedModel>> named = ServedModel::Load(dir, "mine");
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ((*named)->limits().name, "mine");

  // chat_template.jinja (what newer transformers saves) wins over tokenizer_config.json.
  ::tandem::testing::WriteFile(dir + "/chat_template.jinja",
                               "{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}\n");
  const absl::StatusOr<std::unique_ptr<ServedModel>> jinja = ServedModel::Load(dir, "");
  ASSERT_TRUE(jinja.ok()) << jinja.status();
  EXPECT_EQ((*jinja)->tokenizer().Decode(*(*jinja)->Tokenize(chat)), "<|im_start|>user");
  // --chat_template FILE overrides the model's template.
  const std::string override_file = tmp.path() + "/override.jinja";
  ::tandem::testing::WriteFile(override_file, "{{ messages[0].content }}{{ messages[0].content }}");
  const absl::StatusOr<std::unique_ptr<ServedModel>> overridden =
      ServedModel::Load(dir, "", override_file);
  ASSERT_TRUE(overridden.ok()) << overridden.status();
  EXPECT_THAT((*overridden)->chat().Describe(), ::testing::HasSubstr(override_file));
  EXPECT_EQ((*overridden)->tokenizer().Decode(*(*overridden)->Tokenize(chat)), "hihi");
  EXPECT_EQ(ServedModel::Load(dir, "", tmp.path() + "/missing.jinja").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tandem
