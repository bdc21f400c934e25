#include "router/http/openai_sampling.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tandem {
namespace {

using Json = nlohmann::json;

absl::Status Number(const Json& body, const char* field, float& out) {
  const auto it = body.find(field);
  if (it == body.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_number()) {
    return OpenAiInvalidParam(field, absl::StrCat("'", field, "' must be a number"));
  }
  out = static_cast<float>(it->get<double>());
  return absl::OkStatus();
}

// A JSON integer as an int32 token id or count; out-of-range values fail naming `field`.
std::optional<int32_t> Int32(const Json& v) {
  if (!v.is_number_integer()) return std::nullopt;
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
      return std::nullopt;
    }
    return static_cast<int32_t>(v.get<uint64_t>());
  }
  const int64_t x = v.get<int64_t>();
  if (x < std::numeric_limits<int32_t>::min() || x > std::numeric_limits<int32_t>::max()) {
    return std::nullopt;
  }
  return static_cast<int32_t>(x);
}

absl::Status LogitBias(const Json& body, SamplingParams& sampling) {
  const auto it = body.find("logit_bias");
  if (it == body.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_object()) {
    return OpenAiInvalidParam("logit_bias",
                              "'logit_bias' must be an object mapping token ids to biases");
  }
  for (const auto& [key, value] : it->items()) {
    int32_t id = 0;
    if (!absl::SimpleAtoi(key, &id)) {
      return OpenAiInvalidParam("logit_bias",
                                absl::StrCat("'logit_bias' key '", key, "' is not a token id"));
    }
    if (!value.is_number()) {
      return OpenAiInvalidParam(
          "logit_bias", absl::StrCat("'logit_bias' value for '", key, "' must be a number"));
    }
    // vLLM clamps each bias to [-100, 100].
    const float bias = static_cast<float>(std::clamp(value.get<double>(), -100.0, 100.0));
    sampling.logit_bias.emplace_back(id, bias);
  }
  std::sort(sampling.logit_bias.begin(), sampling.logit_bias.end());
  return absl::OkStatus();
}

absl::Status StopTokenIds(const Json& body, std::vector<int32_t>& ids) {
  const auto it = body.find("stop_token_ids");
  if (it == body.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_array()) {
    return OpenAiInvalidParam("stop_token_ids", "'stop_token_ids' must be an array of token ids");
  }
  for (const Json& v : *it) {
    const std::optional<int32_t> id = Int32(v);
    if (!id.has_value()) {
      return OpenAiInvalidParam("stop_token_ids",
                                "'stop_token_ids' must contain only token ids (integers)");
    }
    ids.push_back(*id);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseOpenAiSamplerFields(const Json& body, OpenAiRequest& request) {
  SamplingParams& s = request.sampling;
  for (const auto& [field, out] : {std::pair<const char*, float*>{"min_p", &s.min_p},
                                   {"repetition_penalty", &s.repetition_penalty},
                                   {"presence_penalty", &s.presence_penalty},
                                   {"frequency_penalty", &s.frequency_penalty}}) {
    if (absl::Status st = Number(body, field, *out); !st.ok()) return st;
  }
  if (const auto it = body.find("min_tokens"); it != body.end() && !it->is_null()) {
    const std::optional<int32_t> n = Int32(*it);
    if (!n.has_value()) {
      return OpenAiInvalidParam("min_tokens", "'min_tokens' must be an integer");
    }
    s.min_tokens = *n;
  }
  if (absl::Status st = LogitBias(body, s); !st.ok()) return st;
  return StopTokenIds(body, request.stop_token_ids);
}

absl::Status ParseOpenAiLogprobs(const Json& body, OpenAiRequest& request) {
  auto count = [](const Json& v, const char* field) -> absl::StatusOr<int32_t> {
    const std::optional<int32_t> n = Int32(v);
    if (!n.has_value() || *n < 0 || *n > kMaxLogprobs) {
      return OpenAiInvalidParam(
          field, absl::StrCat("'", field, "' must be an integer in [0, ", kMaxLogprobs, "]"));
    }
    return *n;
  };
  const auto logprobs = body.find("logprobs");
  const bool has_logprobs = logprobs != body.end() && !logprobs->is_null();
  if (request.endpoint == OpenAiEndpoint::kCompletions) {
    // A count; false (what chat clients send for "none") asks for nothing.
    if (!has_logprobs || (logprobs->is_boolean() && !logprobs->get<bool>())) {
      return absl::OkStatus();
    }
    absl::StatusOr<int32_t> n = count(*logprobs, "logprobs");
    if (!n.ok()) return n.status();
    request.sampling.logprobs = *n;
    return absl::OkStatus();
  }
  if (has_logprobs && !logprobs->is_boolean()) {
    return OpenAiInvalidParam("logprobs", "'logprobs' must be a boolean");
  }
  const bool wanted = has_logprobs && logprobs->get<bool>();
  int32_t top = 0;
  if (const auto it = body.find("top_logprobs"); it != body.end() && !it->is_null()) {
    absl::StatusOr<int32_t> n = count(*it, "top_logprobs");
    if (!n.ok()) return n.status();
    if (*n > 0 && !wanted) {
      return OpenAiInvalidParam("top_logprobs", "'top_logprobs' needs 'logprobs' set to true");
    }
    top = *n;
  }
  if (wanted) request.sampling.logprobs = top;
  return absl::OkStatus();
}

}  // namespace tandem
