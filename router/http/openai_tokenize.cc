#include "router/http/openai_tokenize.h"

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/request_checks.h"
#include "router/http/openai_prepare.h"
#include "router/http/openai_request.h"

namespace tandem {
namespace {

using Json = nlohmann::json;

absl::StatusOr<Json> ParseObject(absl::string_view body) {
  Json json = Json::parse(body, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return absl::InvalidArgumentError("request body is not valid JSON");
  if (!json.is_object()) return absl::InvalidArgumentError("request body must be a JSON object");
  return json;
}

std::string Dump(const Json& json) {
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace

absl::StatusOr<TokenizeAnswer> Tokenize(const ServedModel& model, absl::string_view body) {
  absl::StatusOr<Json> json = ParseObject(body);
  if (!json.ok()) return json.status();
  bool token_strs = false;
  if (const auto it = json->find("return_token_strs"); it != json->end() && !it->is_null()) {
    if (!it->is_boolean()) {
      return OpenAiInvalidParam("return_token_strs", "'return_token_strs' must be a boolean");
    }
    token_strs = it->get<bool>();
  }
  const OpenAiEndpoint endpoint =
      json->contains("messages") ? OpenAiEndpoint::kChatCompletions : OpenAiEndpoint::kCompletions;
  absl::StatusOr<OpenAiRequest> request = ParseOpenAiRequest(endpoint, body);
  if (!request.ok()) return request.status();
  for (const absl::Status& s :
       {ValidateModelName(request->model, model.limits()), ValidatePromptInput(request->prompt)}) {
    if (!s.ok()) return s;
  }
  absl::StatusOr<std::vector<int32_t>> tokenized = TokenizeOpenAiPrompt(model, *request);
  if (!tokenized.ok()) return tokenized.status();
  const std::vector<int32_t> ids = *std::move(tokenized);
  Json answer{
      {"count", ids.size()}, {"max_model_len", model.limits().context_length}, {"tokens", ids}};
  if (token_strs) {
    Json strs = Json::array();
    for (const int32_t id : ids) {
      const absl::StatusOr<absl::string_view> text = model.tokenizer().TokenText(id);
      strs.push_back(text.ok() ? std::string(*text) : std::string());
    }
    answer["token_strs"] = std::move(strs);
  }
  TokenizeAnswer out{Dump(answer), std::move(request->unknown_fields)};
  std::erase(out.unknown_fields, "return_token_strs");
  return out;
}

absl::StatusOr<TokenizeAnswer> Detokenize(const ServedModel& model, absl::string_view body) {
  absl::StatusOr<Json> json = ParseObject(body);
  if (!json.ok()) return json.status();
  TokenizeAnswer out;
  for (const auto& [key, value] : json->items()) {
    if (key == "model") {
      if (!value.is_null() && !value.is_string()) {
        return OpenAiInvalidParam("model", "'model' must be a string");
      }
      if (value.is_string()) {
        if (absl::Status s = ValidateModelName(value.get<std::string>(), model.limits()); !s.ok()) {
          return s;
        }
      }
    } else if (key != "tokens") {
      out.unknown_fields.push_back(key);
    }
  }
  const auto tokens = json->find("tokens");
  if (tokens == json->end() || !tokens->is_array()) {
    return OpenAiInvalidParam("tokens", "'tokens' must be an array of token ids");
  }
  std::vector<int32_t> ids;
  for (const Json& id : *tokens) {
    if (!id.is_number_integer()) {
      return OpenAiInvalidParam("tokens", "'tokens' must contain only integers");
    }
    const int64_t v = id.get<int64_t>();
    ids.push_back(static_cast<int32_t>(std::clamp<int64_t>(v, INT32_MIN, INT32_MAX)));
  }
  if (!ids.empty()) {
    if (absl::Status s = CheckTokenIds(ids, model.limits().vocab_size, "tokens"); !s.ok()) {
      return OpenAiInvalidParam("tokens", s.message());
    }
  }
  out.body = Dump(Json{{"prompt", model.tokenizer().Decode(ids, /*skip_special=*/false)}});
  return out;
}

}  // namespace tandem
