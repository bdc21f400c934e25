#include "router/http/openai_structured.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/grammar/gbnf.h"
#include "model/grammar/json_schema.h"
#include "model/grammar/regex.h"
#include "router/http/openai_request.h"

namespace tandem {
namespace {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

bool Present(const Json& body, const char* field) {
  const auto it = body.find(field);
  return it != body.end() && !it->is_null();
}

// The front end's message, prefixed with the field that carried it.
absl::Status Refuse(const std::string& field, const absl::Status& s) {
  return OpenAiInvalidParam(field, absl::StrCat("'", field, "': ", s.message()));
}

// `schema` (an object, or JSON text as vLLM also takes) to GBNF.
absl::StatusOr<std::string> SchemaGbnf(const std::string& field, const OrderedJson& schema) {
  absl::StatusOr<std::string> gbnf =
      schema.is_string() ? JsonSchemaTextToGbnf(schema.get<std::string>())
                         : (schema.is_object() || schema.is_boolean()
                                ? JsonSchemaToGbnf(schema)
                                : absl::InvalidArgumentError("a schema must be a JSON object"));
  if (!gbnf.ok()) return Refuse(field, gbnf.status());
  return gbnf;
}

absl::StatusOr<std::string> ResponseFormat(const Json& format, const OrderedJson& ordered) {
  const auto type = format.is_object() ? format.find("type") : format.end();
  if (type == format.end() || !type->is_string()) {
    return OpenAiInvalidParam("response_format",
                              "'response_format' must be an object with a 'type' (\"text\", "
                              "\"json_object\" or \"json_schema\")");
  }
  if (*type == "text") return std::string();
  if (*type == "json_object") return JsonObjectGbnf();
  if (*type != "json_schema") {
    return OpenAiInvalidParam(
        "response_format.type",
        absl::StrCat("'response_format.type' must be \"text\", \"json_object\" or "
                     "\"json_schema\" (got ",
                     type->dump(), ")"));
  }
  const auto spec = format.find("json_schema");
  if (spec == format.end() || !spec->is_object()) {
    return OpenAiInvalidParam("response_format.json_schema",
                              "'response_format.json_schema' must be an object with a 'schema'");
  }
  if (!spec->contains("schema") || (*spec)["schema"].is_null()) {
    return OpenAiInvalidParam("response_format.json_schema.schema",
                              "'response_format.json_schema.schema' is required");
  }
  return SchemaGbnf("response_format.json_schema.schema",
                    ordered["response_format"]["json_schema"]["schema"]);
}

absl::StatusOr<std::string> GuidedChoice(const Json& choices) {
  if (!choices.is_array() || choices.empty()) {
    return OpenAiInvalidParam("guided_choice",
                              "'guided_choice' must be a non-empty array of strings");
  }
  std::vector<std::string> literals;
  for (const Json& c : choices) {
    if (!c.is_string() || c.get<std::string>().empty()) {
      return OpenAiInvalidParam("guided_choice",
                                "'guided_choice' must contain only non-empty strings");
    }
    literals.push_back(GbnfLiteral(c.get<std::string>()));
  }
  return absl::StrCat("root ::= ", absl::StrJoin(literals, " | "), "\n");
}

}  // namespace

absl::StatusOr<std::optional<OpenAiStructuredOutput>> ParseOpenAiStructuredOutput(
    const Json& body, absl::string_view raw_body) {
  std::vector<const char*> given;
  for (const char* field :
       {"response_format", "guided_json", "guided_regex", "guided_choice", "guided_grammar"}) {
    if (Present(body, field)) given.push_back(field);
  }
  // response_format {"type": "text"} asks for nothing.
  if (!given.empty() && std::string(given[0]) == "response_format") {
    const Json& format = body["response_format"];
    if (format.is_object() && format.contains("type") && format["type"] == "text") {
      given.erase(given.begin());
    }
  }
  if (given.empty()) return std::nullopt;
  if (given.size() > 1) {
    return OpenAiInvalidParam(given[1], absl::StrCat("only one of 'response_format', "
                                                     "'guided_json', 'guided_regex', "
                                                     "'guided_choice' and 'guided_grammar' may "
                                                     "be set (got '",
                                                     given[0], "' and '", given[1], "')"));
  }
  const std::string field = given[0];
  // Key order matters for schemas (properties are generated in the order given).
  const OrderedJson ordered = OrderedJson::parse(raw_body, nullptr, false);
  if (ordered.is_discarded()) return absl::InvalidArgumentError("request body is not valid JSON");
  OpenAiStructuredOutput out;
  out.field = field;
  const Json& value = body[field];
  if (field == "response_format") {
    absl::StatusOr<std::string> g = ResponseFormat(value, ordered);
    if (!g.ok()) return g.status();
    out.grammar = *std::move(g);
  } else if (field == "guided_json") {
    absl::StatusOr<std::string> g = SchemaGbnf(field, ordered[field]);
    if (!g.ok()) return g.status();
    out.grammar = *std::move(g);
  } else if (field == "guided_regex") {
    if (!value.is_string()) {
      return OpenAiInvalidParam(field, "'guided_regex' must be a string");
    }
    absl::StatusOr<std::string> g = RegexToGbnf(value.get<std::string>());
    if (!g.ok()) return Refuse(field, g.status());
    out.grammar = *std::move(g);
  } else if (field == "guided_choice") {
    absl::StatusOr<std::string> g = GuidedChoice(value);
    if (!g.ok()) return g.status();
    out.grammar = *std::move(g);
  } else {
    if (!value.is_string()) {
      return OpenAiInvalidParam(field, "'guided_grammar' must be a string (GBNF)");
    }
    out.grammar = value.get<std::string>();
  }
  // Every check short of the vocabulary: the 400 comes before any prefill.
  if (absl::StatusOr<GbnfGrammar> parsed = ParseGbnf(out.grammar); !parsed.ok()) {
    return Refuse(field, parsed.status());
  }
  return out;
}

}  // namespace tandem
