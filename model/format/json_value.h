// JSON documents (config.json, tokenizer.json, safetensors headers) parsed with protobuf's JSON
// parser into google.protobuf.Struct, plus typed field access with precise errors. This file
// is the one place protobuf's util::Status is translated to absl::Status for model loading.
//
// Pure functions apart from ReadFileToString; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/struct.pb.h"

namespace tandem {

// Parses a JSON object. InvalidArgument ("<what>: ...") when the text is not a JSON object.
[[nodiscard]] absl::StatusOr<google::protobuf::Struct> ParseJsonObject(absl::string_view json,
                                                                       absl::string_view what);

// Whole file contents; InvalidArgument when larger than max_bytes (never allocated).
[[nodiscard]] absl::StatusOr<std::string> ReadFileToString(const std::string& path,
                                                           uint64_t max_bytes);

// Null when the field is absent or JSON null.
const google::protobuf::Value* FindField(const google::protobuf::Struct& s, absl::string_view key);

// Typed reads of a value; `what` names it in errors ("config.json: hidden_size is ...").
absl::StatusOr<int64_t> JsonInt(const google::protobuf::Value& v, absl::string_view what);
absl::StatusOr<double> JsonNumber(const google::protobuf::Value& v, absl::string_view what);
absl::StatusOr<bool> JsonBool(const google::protobuf::Value& v, absl::string_view what);
absl::StatusOr<std::string> JsonString(const google::protobuf::Value& v, absl::string_view what);

}  // namespace tandem
