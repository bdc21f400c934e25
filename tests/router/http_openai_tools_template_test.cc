// Tools through the model's own chat template (router/http/openai_prepare.cc ApplyTools,
// docs/structured_output.md#tools): for real templates that render tools (the llama.cpp cache,
// $TANDEM_LLAMACPP_DATA/templates), the prompt PrepareOpenAiRequest tokenises is exactly what the
// template renders for the conversation as transformers / vLLM pass it (`tools`, assistant
// `tool_calls` with the arguments as a dict, `tool` messages with their `tool_call_id`), the
// output format follows the template and a forced call's grammar is in that format. A template
// that never mentions tools gets the documented Hermes fallback. The template engine renders
// these conversations as jinja2 does (model_chat_template_oracle_test), so the engine is the
// reference here.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "model/chat_template/chat_template.h"
#include "model/chat_template/json_value.h"
#include "router/http/openai_prepare.h"
#include "router/http/openai_tools.h"
#include "tests/router/test_model.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using OrderedJson = nlohmann::ordered_json;

constexpr char kTools[] = R"([{"type": "function", "function": {"name": "get_weather",
    "description": "The current weather in a city", "parameters": {"type": "object",
    "properties": {"city": {"type": "string", "description": "The city"},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"], "additionalProperties": false}}}])";

// A full round trip, as the OpenAI client sends it: the call (content null, arguments as JSON
// text) and its result. Mistral's templates want 9-character alphanumeric call ids.
std::string RoundTripBody(const std::string& extra) {
  return std::string(R"({"model": "tiny-test", "max_tokens": 8, "tools": )") + kTools +
         R"(, "messages": [
      {"role": "system", "content": "You are terse."},
      {"role": "user", "content": "What is the weather in Paris?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "abcDEF123", "type": "function",
        "function": {"name": "get_weather",
                     "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}]},
      {"role": "tool", "tool_call_id": "abcDEF123", "content": "22 degrees, sunny"}])" +
         extra + "}";
}

// The same conversation as transformers' apply_chat_template receives it from vLLM: the
// arguments parsed into a dict, content null read as "" (the router's text of a null content).
OrderedJson RoundTripMessages() {
  return OrderedJson::parse(R"([
      {"role": "system", "content": "You are terse."},
      {"role": "user", "content": "What is the weather in Paris?"},
      {"role": "assistant", "content": "", "tool_calls": [{"id": "abcDEF123", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]},
      {"role": "tool", "content": "22 degrees, sunny", "tool_call_id": "abcDEF123"}])");
}

std::string ReadTemplate(const std::string& name) {
  const char* dir = std::getenv("TANDEM_LLAMACPP_DATA");
  if (dir == nullptr || *dir == '\0') return "";
  std::ifstream f(std::string(dir) + "/templates/" + name);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// What the template renders for `messages` and `tools`, with the special tokens the router's
// formatter gets from the tokenizer (chat_setup.cc MakeChatFormatter).
std::string RenderDirectly(const std::string& source, const Tokenizer& tokenizer,
                           const OrderedJson& messages, const OrderedJson& tools) {
  absl::StatusOr<std::shared_ptr<const ChatTemplate>> t = ChatTemplate::Parse(source);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return "";
  jinja::Map vars;
  vars.Set("messages", jinja::FromJson(messages));
  vars.Set("tools", tools.is_null() ? jinja::Value::None() : jinja::FromJson(tools));
  vars.Set("documents", jinja::Value::None());
  vars.Set("add_generation_prompt", jinja::Value(true));
  for (const auto& [key, id] :
       {std::pair{"bos_token", tokenizer.bos_id()}, std::pair{"eos_token", tokenizer.eos_id()}}) {
    if (!id.has_value()) continue;
    absl::StatusOr<absl::string_view> text = tokenizer.TokenText(*id);
    if (text.ok() && !text->empty()) vars.Set(key, jinja::Value(std::string(*text)));
  }
  absl::StatusOr<std::string> out = (*t)->Render(vars);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : "";
}

std::string PromptText(const ServedModel& model, const PreparedOpenAiRequest& p) {
  const auto& ids = p.generate.prompt.token_ids;
  return model.tokenizer().Decode(std::vector<int32_t>(ids.begin(), ids.end()));
}

struct Case {
  const char* file;
  ToolCallFormat format;
  const char* marker;  // text only the template's own tool rendering writes
};

class ToolsThroughTemplateTest : public ::testing::TestWithParam<Case> {};

TEST_P(ToolsThroughTemplateTest, PromptIsTheTemplatesOwnRendering) {
  const Case& c = GetParam();
  const std::string source = ReadTemplate(c.file);
  if (source.empty()) {
    GTEST_SKIP() << "TANDEM_LLAMACPP_DATA is not set (or lacks templates/" << c.file
                 << "); run deploy/fetch-llamacpp-data.sh";
  }
  ASSERT_TRUE(TemplateRendersTools(source)) << c.file;
  std::unique_ptr<ServedModel> model = testing_router::MakeTestModel(1 << 16, source);
  ASSERT_NE(model, nullptr);

  const absl::StatusOr<PreparedOpenAiRequest> auto_call =
      PrepareOpenAiRequest(*model, OpenAiEndpoint::kChatCompletions, RoundTripBody(""), "r1");
  ASSERT_TRUE(auto_call.ok()) << auto_call.status();
  const std::string want =
      RenderDirectly(source, model->tokenizer(), RoundTripMessages(), OrderedJson::parse(kTools));
  ASSERT_FALSE(want.empty());
  // Token for token: the router's prompt is the template's rendering, encoded as the router
  // encodes a templated chat (special markers parsed, no tokenizer BOS).
  const std::vector<int32_t> want_ids =
      model->tokenizer().Encode(want, /*parse_special=*/true, /*with_bos=*/false);
  const auto& got_ids = auto_call->generate.prompt.token_ids;
  EXPECT_EQ(std::vector<int32_t>(got_ids.begin(), got_ids.end()), want_ids)
      << "router:\n"
      << PromptText(*model, *auto_call) << "\ntemplate:\n"
      << want;
  const std::string prompt = PromptText(*model, *auto_call);
  EXPECT_THAT(prompt, HasSubstr("get_weather"));  // the tool list
  EXPECT_THAT(prompt, HasSubstr("Paris"));        // the call's arguments
  EXPECT_THAT(prompt, HasSubstr("22 degrees, sunny"));
  EXPECT_THAT(prompt, HasSubstr(c.marker));
  // Not the fallback's injected text (Hermes' own template writes the same <tool_response>).
  EXPECT_THAT(prompt, Not(HasSubstr(HermesToolSystemPrompt(OrderedJson::parse(kTools)))));
  EXPECT_EQ(auto_call->request.tool_format, c.format);
  EXPECT_TRUE(auto_call->request.sampling.grammar.empty());

  // tool_choice "none": the template still gets the tools (vLLM's default), nothing is forced.
  const absl::StatusOr<PreparedOpenAiRequest> none = PrepareOpenAiRequest(
      *model, OpenAiEndpoint::kChatCompletions, RoundTripBody(R"(, "tool_choice": "none")"), "r2");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(PromptText(*model, *none), prompt);
  EXPECT_TRUE(none->request.sampling.grammar.empty());

  // A forced call: the grammar of one call in the template's format.
  const absl::StatusOr<PreparedOpenAiRequest> named = PrepareOpenAiRequest(
      *model, OpenAiEndpoint::kChatCompletions,
      RoundTripBody(
          R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}})"),
      "r3");
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(PromptText(*model, *named), prompt);
  ASSERT_TRUE(named->request.tools.has_value());
  const absl::StatusOr<std::string> grammar = ToolCallGrammar(*named->request.tools, c.format);
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  EXPECT_EQ(named->request.sampling.grammar, *grammar);
}

INSTANTIATE_TEST_SUITE_P(LlamaCppTemplates, ToolsThroughTemplateTest,
                         ::testing::Values(Case{"Qwen-Qwen2.5-7B-Instruct.jinja",
                                                ToolCallFormat::kHermes, "<tools>"},
                                           Case{"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
                                                ToolCallFormat::kHermes, "<tool_call>"},
                                           Case{"meta-llama-Llama-3.1-8B-Instruct.jinja",
                                                ToolCallFormat::kLlama3, "ipython"},
                                           Case{"mistralai-Mistral-Nemo-Instruct-2407.jinja",
                                                ToolCallFormat::kMistral, "[AVAILABLE_TOOLS]"}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           std::string name;
                           for (const char* p = info.param.file; *p != '\0' && *p != '.'; ++p) {
                             name += std::isalnum(static_cast<unsigned char>(*p)) ? *p : '_';
                           }
                           return name;
                         });

// A template that never mentions tools (SmolLM2's shape): the Hermes fallback — the tool list
// and instructions as a system message, the call and result as Hermes text, role "tool" as a
// user turn, Hermes parsing.
TEST(ToolsFallbackTest, TemplateWithoutToolsGetsHermesText) {
  const std::string source =
      "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' "
      "}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  ASSERT_FALSE(TemplateRendersTools(source));
  std::unique_ptr<ServedModel> model = testing_router::MakeTestModel(1 << 16, source);
  ASSERT_NE(model, nullptr);
  const absl::StatusOr<PreparedOpenAiRequest> p =
      PrepareOpenAiRequest(*model, OpenAiEndpoint::kChatCompletions, RoundTripBody(""), "r");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->request.tool_format, ToolCallFormat::kHermes);
  const std::string tools = HermesToolSystemPrompt(OrderedJson::parse(kTools));
  EXPECT_EQ(
      PromptText(*model, *p),
      "<|im_start|>system\nYou are terse.\n\n" + tools +
          "<|im_end|>\n<|im_start|>user\nWhat is the weather in Paris?<|im_end|>\n"
          "<|im_start|>assistant\n<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":"
          "\"Paris\",\"unit\":\"celsius\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n"
          "<tool_response>\n22 degrees, sunny\n</tool_response><|im_end|>\n"
          "<|im_start|>assistant\n");
}

}  // namespace
}  // namespace tandem
