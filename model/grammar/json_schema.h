// JSON Schema -> GBNF (issue 25 item 1): response_format json_schema, vLLM's guided_json,
// and tool-call arguments.
//
// Every output the grammar allows is a JSON text that parses (nlohmann::json::parse) and
// validates against the schema. The grammar may allow less than the schema (see the choices
// below), never more.
//
// Supported keywords:
//   type (a name or an array of names: object, array, string, integer, number, boolean, null),
//   properties, required, additionalProperties (false, true, or a schema), enum, const,
//   items, prefixItems, minItems, maxItems, anyOf, oneOf (see below), allOf with one entry,
//   $ref to "#", "#/$defs/...", "#/definitions/..." or any JSON pointer into the document
//   (recursion included), $defs/definitions, pattern (model/grammar/regex.h's subset),
//   minLength, maxLength, minimum/maximum/exclusiveMinimum/exclusiveMaximum for integers,
//   format (date, time, date-time, uuid, email, ipv4: a regex each).
//   Ignored (annotations): description, title, default, examples, $schema, $id, $comment,
//   deprecated, readOnly, writeOnly, strict, discriminator, nullable-free "x-*" extensions.
// Anything else is InvalidArgument naming the keyword and the JSON pointer of the schema that
// holds it: "json_schema: unsupported keyword 'patternProperties' at /properties/tags".
//
// Choices (documented in docs/structured_output.md):
//  * Properties come in the order of `properties` (see the ordered_json overload); optional
//    ones may be left out.
//  * additionalProperties absent: no other properties when `properties` is given (OpenAI's
//    strict mode, xgrammar's default), any properties when it is not ({"type": "object"} is any
//    object). true or a schema: further properties follow the declared ones; their names are
//    plain strings (no backslash escapes) different from every declared name.
//  * oneOf is compiled as anyOf: the output matches at least one branch; when branches overlap
//    it may match several, which oneOf forbids. Schemas with disjoint branches (different
//    types, different const/enum values, different required discriminators) are exact.
//  * number: JSON numbers with at most 16 integer digits, 16 fraction digits, 3 exponent
//    digits; integer: at most 16 digits (so every integer fits int64). Bounds on numbers that
//    are not integers are refused.
//  * Strings never contain surrogate \u escapes (a raw UTF-8 character instead); pattern
//    strings escape only '"', '\', \n, \r, \t. pattern with minLength/maxLength is refused.
//  * Whitespace: between tokens at most one of: nothing, one space, or one newline followed by
//    up to 20 spaces/tabs (llama.cpp's bound; pretty-printed output stays possible, endless
//    whitespace does not). None before the first or after the last token.
//
// Rule names: root_rule for the root, "<root_rule>-<suffix>" for every helper, so several
// schemas (one per tool) can live in one grammar under a root rule the caller writes.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace tandem {

// nlohmann::json keeps object keys sorted, so `properties` come out in alphabetical order;
// pass an ordered_json (or the text) to keep the schema's order, as OpenAI and vLLM do.
absl::StatusOr<std::string> JsonSchemaToGbnf(const nlohmann::json& schema,
                                             std::string_view root_rule = "root");
absl::StatusOr<std::string> JsonSchemaToGbnf(const nlohmann::ordered_json& schema,
                                             std::string_view root_rule = "root");
// The schema as JSON text (parsed keeping key order); InvalidArgument when it is not JSON.
absl::StatusOr<std::string> JsonSchemaTextToGbnf(std::string_view schema_json,
                                                 std::string_view root_rule = "root");

// Any JSON object (response_format json_object), same whitespace policy.
std::string JsonObjectGbnf(std::string_view root_rule = "root");

// Any JSON value.
std::string JsonValueGbnf(std::string_view root_rule = "root");

}  // namespace tandem
