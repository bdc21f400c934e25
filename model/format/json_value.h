// JSON documents (config.json, tokenizer.json, safetensors headers) parsed with nlohmann::json,
// as everywhere else in Tandem, plus typed field access with precise errors. This file is the one
// place nlohmann's parse errors become absl::Status for model loading (no exception leaves it).
//
// Pure functions apart from ReadFileToString; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace tandem {

// Parses a JSON object. InvalidArgument ("<what>: ...") when the text is not a JSON object.
[[nodiscard]] absl::StatusOr<nlohmann::json> ParseJsonObject(absl::string_view json,
                                                             absl::string_view what);

// Whole file contents; InvalidArgument when larger than max_bytes (never allocated).
[[nodiscard]] absl::StatusOr<std::string> ReadFileToString(const std::string& path,
                                                           uint64_t max_bytes);

// The field `key` of an object; null when the field is absent or JSON null (or `object` is not an
// object).
const nlohmann::json* FindField(const nlohmann::json& object, absl::string_view key);

// Typed reads of a value; `what` names it in errors ("config.json: hidden_size is ...").
// JsonInt accepts any number that is a whole number of magnitude <= 2^53 (1 and 1.0 alike).
absl::StatusOr<int64_t> JsonInt(const nlohmann::json& v, absl::string_view what);
absl::StatusOr<double> JsonNumber(const nlohmann::json& v, absl::string_view what);
absl::StatusOr<bool> JsonBool(const nlohmann::json& v, absl::string_view what);
absl::StatusOr<std::string> JsonString(const nlohmann::json& v, absl::string_view what);

}  // namespace tandem
