#include "router/request_prep.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/request_checks.h"
#include "common/status_macros.h"
#include "model/grammar/gbnf.h"
#include "proto/convert/sampling_proto.h"
#include "router/request_validation.h"

namespace tandem {
namespace {

PromptInput PromptFromProto(const v1::GenerateRequest& request) {
  PromptInput prompt;
  switch (request.prompt_case()) {
    case v1::GenerateRequest::kText:
      prompt.kind = PromptInput::Kind::kText;
      prompt.text = request.text();
      break;
    case v1::GenerateRequest::kTokenIds:
      prompt.kind = PromptInput::Kind::kTokenIds;
      prompt.token_ids.assign(request.token_ids().ids().begin(), request.token_ids().ids().end());
      break;
    case v1::GenerateRequest::kChat:
      prompt.kind = PromptInput::Kind::kChat;
      for (const v1::ChatMessage& m : request.chat().messages()) {
        prompt.chat.push_back({m.role(), m.content()});
      }
      prompt.add_generation_prompt =
          !request.chat().has_add_generation_prompt() || request.chat().add_generation_prompt();
      prompt.continue_final_message = request.chat().continue_final_message();
      break;
    case v1::GenerateRequest::PROMPT_NOT_SET:
      break;
  }
  return prompt;
}

}  // namespace

GenerateInput GenerateInputFromProto(const v1::GenerateRequest& request) {
  GenerateInput input;
  input.model = request.model();
  input.prompt = PromptFromProto(request);
  input.sampling = FromProto(request.sampling());
  input.max_tokens = request.max_tokens();
  input.n = request.n();
  input.request_id = request.request_id();
  input.ignore_eos = request.ignore_eos();
  input.stop_token_ids.assign(request.stop_token_ids().begin(), request.stop_token_ids().end());
  input.strict = request.strict();
  return input;
}

absl::StatusOr<PreparedRequest> PrepareRequest(const ServedModel& model,
                                               const v1::GenerateRequest& request) {
  return PrepareRequest(model, GenerateInputFromProto(request));
}

absl::StatusOr<PreparedRequest> PrepareRequest(const ServedModel& model,
                                               const GenerateInput& request) {
  const ModelLimits& limits = model.limits();
  TANDEM_RETURN_IF_ERROR(ValidateModelName(request.model, limits));
  const PromptInput& input = request.prompt;
  TANDEM_RETURN_IF_ERROR(ValidatePromptInput(input));
  TANDEM_RETURN_IF_ERROR(ValidateMaxTokens(request.max_tokens));
  PreparedRequest out;
  out.n = request.n == 0 ? 1 : request.n;
  TANDEM_RETURN_IF_ERROR(CheckChoices(out.n));
  out.sampling = request.sampling;
  out.sampling.min_tokens_stop_ids.clear();  // the router's own, set below
  TANDEM_RETURN_IF_ERROR(ValidateSamplingParams(out.sampling));
  TANDEM_RETURN_IF_ERROR(
      ValidateSamplingForModel(out.sampling, request.stop_token_ids, request.max_tokens, limits));
  if (!out.sampling.grammar.empty()) {
    // Checked here, before any prefill, so a bad grammar is the client's 400 (the nodes compile
    // it against the vocabulary; ParseGbnf makes every check that does not need one).
    if (absl::StatusOr<GbnfGrammar> g = ParseGbnf(out.sampling.grammar); !g.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("sampling.grammar: ", g.status().message()));
    }
  }
  TANDEM_ASSIGN_OR_RETURN(out.prompt, model.Tokenize(input));
  TANDEM_RETURN_IF_ERROR(ValidatePromptIds(out.prompt, limits));
  TANDEM_RETURN_IF_ERROR(
      ValidateLengths(static_cast<int64_t>(out.prompt.size()), request.max_tokens, limits));
  out.max_tokens = request.max_tokens;
  if (!request.ignore_eos) out.stop_ids = model.tokenizer().stop_ids();
  for (const int32_t id : request.stop_token_ids) {
    if (std::find(out.stop_ids.begin(), out.stop_ids.end(), id) == out.stop_ids.end()) {
      out.stop_ids.push_back(id);
    }
  }
  // The nodes suppress these for min_tokens, and a grammar allows them only where it is
  // complete (model/guided_sampling.h; the prefill node knows the stop ids only from here).
  if (out.sampling.min_tokens > 0 || !out.sampling.grammar.empty()) {
    out.sampling.min_tokens_stop_ids = out.stop_ids;
  }
  return out;
}

}  // namespace tandem
