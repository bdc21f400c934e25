#include "router/http/openai_prepare.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/chat_template/chat_formatter.h"
#include "router/http/openai_tools.h"
#include "router/request_validation.h"

namespace tandem {
namespace {

// The router's request: the prompt as the ids it tokenised to (so the usage and the default
// budget are known here), the budget, sampling and stop behaviour.
GenerateInput ToGenerateInput(const OpenAiRequest& r, const std::vector<int32_t>& ids,
                              int32_t max_tokens, const std::string& request_id) {
  GenerateInput g;
  g.model = r.model;
  g.prompt.kind = PromptInput::Kind::kTokenIds;
  g.prompt.token_ids = ids;
  g.sampling = r.sampling;
  g.sampling.seed = r.seed.has_value() ? *r.seed : std::random_device{}();
  g.max_tokens = max_tokens;
  g.n = r.n;
  g.request_id = request_id;
  g.ignore_eos = r.ignore_eos;
  g.stop_token_ids = r.stop_token_ids;
  g.strict = r.tandem.strict;
  return g;
}

// Tools (openai_tools.h, docs/structured_output.md#tools). A template that renders tools gets
// them as transformers passes them (the `tools` list, assistant turns' `tool_calls`, `tool`
// messages with their `tool_call_id`) and its own call format; any other gets the fallback: the
// conversation's tool calls and results as Hermes text and the tool list as a system message.
// Then a forced call's grammar, in the format the model was shown.
absl::Status ApplyTools(OpenAiRequest& r, const ChatFormatter& chat_formatter) {
  std::vector<ChatMessage>& chat = r.prompt.chat;
  const bool offered = r.tools.has_value() && r.tools->choice != OpenAiTools::Choice::kNone;
  if (chat_formatter.uses_template() && TemplateRendersTools(chat_formatter.template_source())) {
    r.tool_format = ToolCallFormatFor(chat_formatter.template_source());
    // tool_choice "none" still passes the tools, as vLLM does by default (templates written for
    // tools may iterate them unconditionally); the output is then not parsed for calls.
    if (r.tools.has_value()) r.prompt.tools_json = r.tools->tools_json.dump();
  } else {
    r.tool_format = ToolCallFormat::kHermes;
    for (size_t i = 0; i < chat.size(); ++i) {
      if (i < r.message_tool_calls.size() && r.message_tool_calls[i].is_array() &&
          !r.message_tool_calls[i].empty()) {
        const std::string calls = HermesToolCallsText(r.message_tool_calls[i]);
        chat[i].content =
            chat[i].content.empty() ? calls : absl::StrCat(chat[i].content, "\n", calls);
      }
      chat[i].tool_calls_json.clear();
      chat[i].tool_call_id.clear();
      if (chat[i].role == "tool") {
        chat[i].role = "user";
        chat[i].content = HermesToolResponseText(chat[i].content);
      }
    }
    if (offered) {
      const std::string system = HermesToolSystemPrompt(r.tools->tools_json);
      if (!chat.empty() && chat[0].role == "system") {
        chat[0].content = absl::StrCat(chat[0].content, "\n\n", system);
      } else {
        chat.insert(chat.begin(), ChatMessage{"system", system});
      }
    }
  }
  if (offered && (r.tools->choice == OpenAiTools::Choice::kRequired ||
                  r.tools->choice == OpenAiTools::Choice::kNamed)) {
    absl::StatusOr<std::string> grammar = ToolCallGrammar(*r.tools, r.tool_format);
    if (!grammar.ok()) return OpenAiInvalidParam("tools", grammar.status().message());
    r.sampling.grammar = *std::move(grammar);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<int32_t>> TokenizeOpenAiPrompt(const ServedModel& model,
                                                          const OpenAiRequest& request) {
  absl::StatusOr<std::vector<int32_t>> tokenized = model.Tokenize(request.prompt);
  if (!tokenized.ok()) return tokenized.status();
  std::vector<int32_t> ids = *std::move(tokenized);
  // add_special_tokens false: without the BOS the tokenizer put first (it adds exactly one, in
  // front, when the model asks for it); token ids are used as given, and a chat template's own
  // BOS stays (the tokenizer added none).
  const bool tokenizer_bos =
      request.prompt.kind == PromptInput::Kind::kText ||
      (request.prompt.kind == PromptInput::Kind::kChat && model.chat().add_bos());
  if (!request.add_special_tokens.value_or(true) && tokenizer_bos && model.tokenizer().add_bos() &&
      !ids.empty()) {
    ids.erase(ids.begin());
  }
  // truncate_prompt_tokens: the prompt's last k tokens (-1: as many as the context holds).
  if (request.truncate_prompt_tokens.has_value()) {
    const int64_t keep = *request.truncate_prompt_tokens == -1 ? model.limits().context_length
                                                               : *request.truncate_prompt_tokens;
    if (static_cast<int64_t>(ids.size()) > keep) ids.erase(ids.begin(), ids.end() - keep);
  }
  return ids;
}

absl::StatusOr<PreparedOpenAiRequest> PrepareOpenAiRequest(const ServedModel& model,
                                                           OpenAiEndpoint endpoint,
                                                           absl::string_view body,
                                                           const std::string& request_id) {
  absl::StatusOr<OpenAiRequest> request = ParseOpenAiRequest(endpoint, body);
  if (!request.ok()) return request.status();
  // The router's first two checks, made here so the prompt can be tokenised (same messages).
  // Tools first: the router's role check then sees the roles the template renders (in the
  // Hermes fallback a "tool" message is a user turn, docs/structured_output.md#tools).
  if (request->endpoint == OpenAiEndpoint::kChatCompletions) {
    if (absl::Status s = ApplyTools(*request, model.chat()); !s.ok()) return s;
  }
  const ModelLimits& limits = model.limits();
  for (const absl::Status& s :
       {ValidateModelName(request->model, limits), ValidatePromptInput(request->prompt)}) {
    if (!s.ok()) return s;
  }
  absl::StatusOr<std::vector<int32_t>> tokenized = TokenizeOpenAiPrompt(model, *request);
  if (!tokenized.ok()) return tokenized.status();
  const std::vector<int32_t> ids = *std::move(tokenized);
  // Unset max_tokens: up to the end of the context, as vLLM (at least 1, so a prompt that fills
  // the context gets the router's context-length error).
  const int32_t max_tokens = request->max_tokens.value_or(static_cast<int32_t>(
      std::max<int64_t>(1, limits.context_length - static_cast<int64_t>(ids.size()))));
  PreparedOpenAiRequest out;
  out.prompt_tokens = static_cast<int32_t>(ids.size());
  out.generate = ToGenerateInput(*request, ids, max_tokens, request_id);
  out.request = *std::move(request);
  return out;
}

}  // namespace tandem
