#include "model/format/json_value.h"

#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/format/mapped_file.h"

namespace tandem {

absl::StatusOr<nlohmann::json> ParseJsonObject(absl::string_view json, absl::string_view what) {
  nlohmann::json out;
  try {
    out = nlohmann::json::parse(json.begin(), json.end());
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": not a valid JSON object: ", e.what()));
  }
  if (!out.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": not a valid JSON object: the document is a ", out.type_name()));
  }
  return out;
}

absl::StatusOr<std::string> ReadFileToString(const std::string& path, uint64_t max_bytes) {
  absl::StatusOr<std::unique_ptr<MappedFile>> file = MappedFile::Open(path);
  if (!file.ok()) return file.status();
  const absl::Span<const uint8_t> bytes = (*file)->bytes();
  if (bytes.size() > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is ", bytes.size(), " bytes; at most ", max_bytes, " are accepted"));
  }
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

const nlohmann::json* FindField(const nlohmann::json& object, absl::string_view key) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(std::string(key));
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<double> JsonNumber(const nlohmann::json& v, absl::string_view what) {
  if (!v.is_number()) return absl::InvalidArgumentError(absl::StrCat(what, " is not a number"));
  return v.get<double>();
}

absl::StatusOr<int64_t> JsonInt(const nlohmann::json& v, absl::string_view what) {
  const absl::StatusOr<double> d = JsonNumber(v, what);
  if (!d.ok()) return d.status();
  // Integers beyond 2^53 are not exact as doubles; nothing we read is that large.
  if (std::trunc(*d) != *d || std::fabs(*d) > 9007199254740992.0) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is ", *d, ", not an integer"));
  }
  return static_cast<int64_t>(*d);
}

absl::StatusOr<bool> JsonBool(const nlohmann::json& v, absl::string_view what) {
  if (!v.is_boolean()) return absl::InvalidArgumentError(absl::StrCat(what, " is not a boolean"));
  return v.get<bool>();
}

absl::StatusOr<std::string> JsonString(const nlohmann::json& v, absl::string_view what) {
  if (!v.is_string()) return absl::InvalidArgumentError(absl::StrCat(what, " is not a string"));
  return v.get<std::string>();
}

}  // namespace tandem
