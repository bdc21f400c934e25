#include "router/http/openai_tandem.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "router/http/openai_request.h"

namespace tandem {

absl::StatusOr<TandemRequestOptions> ParseTandemOptions(const nlohmann::json& body) {
  TandemRequestOptions options;
  const auto it = body.find("tandem");
  if (it == body.end() || it->is_null()) return options;
  if (!it->is_object()) {
    return OpenAiInvalidParam(
        "tandem", "'tandem' must be an object: {\"provenance\": bool, \"strict\": bool}");
  }
  for (const auto& [key, value] : it->items()) {
    const std::string field = absl::StrCat("tandem.", key);
    bool* target = key == "provenance" ? &options.provenance
                   : key == "strict"   ? &options.strict
                                       : nullptr;
    if (target == nullptr) {
      return OpenAiInvalidParam(field, absl::StrCat("'", field,
                                                    "' is not a Tandem option (known: "
                                                    "tandem.provenance, tandem.strict)"));
    }
    if (value.is_null()) continue;
    if (!value.is_boolean()) {
      return OpenAiInvalidParam(field, absl::StrCat("'", field, "' must be a boolean"));
    }
    *target = value.get<bool>();
  }
  return options;
}

std::string WithTandemObject(const std::string& body_json, const std::string& provenance_json) {
  nlohmann::json body = nlohmann::json::parse(body_json, nullptr, /*allow_exceptions=*/false);
  nlohmann::json provenance =
      nlohmann::json::parse(provenance_json, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object() || provenance.is_discarded()) return body_json;
  body["tandem"] = nlohmann::json{{"provenance", std::move(provenance)}};
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace tandem
