#include "router/http/openai_response.h"

#include <nlohmann/json.hpp>
#include <optional>

#include "absl/strings/str_cat.h"

namespace tandem {
namespace {

using Json = nlohmann::json;

bool IsChat(const CompletionMeta& meta) {
  return meta.endpoint == OpenAiEndpoint::kChatCompletions;
}

Json Header(const CompletionMeta& meta, bool chunk) {
  const char* object =
      IsChat(meta) ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  Json header{
      {"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}};
  if (!meta.system_fingerprint.empty()) header["system_fingerprint"] = meta.system_fingerprint;
  return header;
}

Json UsageJson(const CompletionUsage& usage) {
  return Json{{"prompt_tokens", usage.prompt_tokens},
              {"completion_tokens", usage.completion_tokens},
              {"total_tokens", usage.prompt_tokens + usage.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", usage.cached_tokens}}}};
}

Json FinishReason(absl::string_view reason) {
  return reason.empty() ? Json(nullptr) : Json(std::string(reason));
}

// Invalid UTF-8 cannot reach a client's JSON parser; replace it rather than fail the response.
std::string Dump(const Json& json) {
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace

const char* ErrorType(int http_status) {
  switch (http_status) {
    case 400:
    case 405:
    case 413:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 429:
      return "rate_limit_error";
    case 503:
      return "service_unavailable_error";
    case 504:
      return "timeout_error";
    case 499:
      return "cancelled_error";
    case 501:
      return "not_implemented_error";
    default:
      return "internal_error";
  }
}

namespace {

Json ErrorJson(int http_status, absl::string_view message, Json param) {
  return Json{{"error",
               {{"message", std::string(message)},
                {"type", ErrorType(http_status)},
                {"param", std::move(param)},
                {"code", http_status}}}};
}

}  // namespace

std::string CompletionId(OpenAiEndpoint endpoint, absl::string_view request_id) {
  return absl::StrCat(endpoint == OpenAiEndpoint::kChatCompletions ? "chatcmpl-" : "cmpl-",
                      request_id);
}

std::string CompletionBody(const CompletionMeta& meta, absl::string_view text,
                           absl::string_view finish_reason, const CompletionUsage& usage,
                           absl::string_view logprobs_json) {
  return CompletionChoicesBody(meta,
                               {CompletionChoice{0, std::string(text), std::string(finish_reason),
                                                 std::string(logprobs_json)}},
                               usage);
}

std::string CompletionChoicesBody(const CompletionMeta& meta,
                                  const std::vector<CompletionChoice>& choices,
                                  const CompletionUsage& usage) {
  Json list = Json::array();
  for (const CompletionChoice& c : choices) {
    Json choice{
        {"index", c.index},
        {"logprobs", c.logprobs_json.empty() ? Json(nullptr) : Json::parse(c.logprobs_json)},
        {"finish_reason", FinishReason(c.finish_reason)}};
    if (IsChat(meta)) {
      choice["message"] = Json{{"role", "assistant"}, {"content", c.text}};
    } else {
      choice["text"] = c.text;
    }
    list.push_back(std::move(choice));
  }
  Json body = Header(meta, /*chunk=*/false);
  body["choices"] = std::move(list);
  body["usage"] = UsageJson(usage);
  return Dump(body);
}

std::string ChunkBody(const CompletionMeta& meta, absl::string_view text, bool role,
                      absl::string_view finish_reason, bool usage_field,
                      absl::string_view logprobs_json, int32_t index) {
  Json choice{{"index", index},
              {"logprobs", logprobs_json.empty() ? Json(nullptr) : Json::parse(logprobs_json)},
              {"finish_reason", FinishReason(finish_reason)}};
  if (IsChat(meta)) {
    Json delta = Json::object();
    if (role) delta["role"] = "assistant";
    if (!text.empty() || finish_reason.empty()) delta["content"] = std::string(text);
    choice["delta"] = delta;
  } else {
    choice["text"] = std::string(text);
  }
  Json body = Header(meta, /*chunk=*/true);
  body["choices"] = Json::array({choice});
  if (usage_field) body["usage"] = nullptr;
  return Dump(body);
}

std::string UsageChunkBody(const CompletionMeta& meta, const CompletionUsage& usage) {
  Json body = Header(meta, /*chunk=*/true);
  body["choices"] = Json::array();
  body["usage"] = UsageJson(usage);
  return Dump(body);
}

std::string SseEvent(absl::string_view json) { return absl::StrCat("data: ", json, "\n\n"); }

std::string ModelsBody(absl::string_view model, int64_t created, int64_t max_model_len) {
  const Json body{{"object", "list"},
                  {"data", Json::array({Json{{"id", std::string(model)},
                                             {"object", "model"},
                                             {"created", created},
                                             {"owned_by", "tandem"},
                                             {"root", std::string(model)},
                                             {"parent", nullptr},
                                             {"max_model_len", max_model_len}}})}};
  return Dump(body);
}

std::string SystemFingerprint(absl::string_view tandem_version, absl::string_view model,
                              int64_t context_length, const std::vector<std::string>& vocabulary) {
  uint64_t h = 14695981039346656037ull;
  // Each piece is length-prefixed, so moving a boundary between pieces changes the hash.
  auto mix = [&h](absl::string_view piece) {
    for (const char c : absl::StrCat(piece.size(), ":", piece)) {
      h ^= static_cast<unsigned char>(c);
      h *= 1099511628211ull;
    }
  };
  mix(tandem_version);
  mix(model);
  mix(absl::StrCat(context_length));
  for (const std::string& token : vocabulary) mix(token);
  return absl::StrCat("fp_", absl::Hex(h, absl::kZeroPad16));
}

int HttpStatusFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
      return 400;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kAborted:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    case absl::StatusCode::kCancelled:
      return 499;
    case absl::StatusCode::kUnimplemented:
      return 501;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    default:
      return 500;  // INTERNAL, UNKNOWN, DATA_LOSS, ALREADY_EXISTS: a bug
  }
}

std::string ErrorBody(const absl::Status& status) {
  const auto param = status.GetPayload(kOpenAiParamPayload);
  return Dump(ErrorJson(HttpStatusFor(status.code()), status.message(),
                        param.has_value() ? Json(std::string(*param)) : Json(nullptr)));
}

std::string ErrorBody(int http_status, absl::string_view message) {
  return Dump(ErrorJson(http_status, message, nullptr));
}

}  // namespace tandem
