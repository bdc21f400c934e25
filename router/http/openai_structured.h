// The OpenAI API's structured-output fields (docs/structured_output.md), turned into the GBNF the
// nodes decode under (SamplingParams::grammar). Pure; thread-safe.
//
//   response_format {"type": "text"}                          unconstrained (the default)
//   response_format {"type": "json_object"}                   any JSON object
//   response_format {"type": "json_schema", "json_schema":
//                    {"name", "schema", "strict", ...}}       JSON valid against `schema`
//   guided_json     (vLLM) a schema (object or JSON text)      as json_schema
//   guided_regex    (vLLM) a regex                             a full match
//   guided_choice   (vLLM) an array of strings                 exactly one of them
//   guided_grammar  (vLLM) GBNF text (llama.cpp's format)      the grammar itself
// At most one of them may constrain a request. Schemas keep the order of their `properties` as
// the body spells them (the body is re-read with key order kept). A schema, regex or grammar the
// compiler cannot handle is INVALID_ARGUMENT naming the field and, for a schema, the keyword and
// where it is: "'response_format': json_schema: unsupported keyword 'patternProperties' at
// /properties/tags".
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tandem {

struct OpenAiStructuredOutput {
  std::string field;    // the body field that asked for it ("response_format", "guided_json")
  std::string grammar;  // GBNF, root rule "root"
};

// `body` as parsed; `raw_body` its text (re-read keeping key order when a schema is given).
// nullopt when no field constrains the output.
[[nodiscard]] absl::StatusOr<std::optional<OpenAiStructuredOutput>> ParseOpenAiStructuredOutput(
    const nlohmann::json& body, absl::string_view raw_body);

}  // namespace tandem
