#include "model/format/json_struct.h"

#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "model/format/mapped_file.h"

namespace tandem {

absl::StatusOr<google::protobuf::Struct> ParseJsonObject(absl::string_view json,
                                                         absl::string_view what) {
  google::protobuf::Struct out;
  const auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), &out);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": not a valid JSON object: ", std::string(status.message())));
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

const google::protobuf::Value* FindField(const google::protobuf::Struct& s, absl::string_view key) {
  const auto it = s.fields().find(std::string(key));
  if (it == s.fields().end() || it->second.kind_case() == google::protobuf::Value::kNullValue) {
    return nullptr;
  }
  return &it->second;
}

absl::StatusOr<double> JsonNumber(const google::protobuf::Value& v, absl::string_view what) {
  if (v.kind_case() != google::protobuf::Value::kNumberValue) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is not a number"));
  }
  return v.number_value();
}

absl::StatusOr<int64_t> JsonInt(const google::protobuf::Value& v, absl::string_view what) {
  const absl::StatusOr<double> d = JsonNumber(v, what);
  if (!d.ok()) return d.status();
  // Integers beyond 2^53 are not exact in a JSON double; nothing we read is that large.
  if (std::trunc(*d) != *d || std::fabs(*d) > 9007199254740992.0) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is ", *d, ", not an integer"));
  }
  return static_cast<int64_t>(*d);
}

absl::StatusOr<bool> JsonBool(const google::protobuf::Value& v, absl::string_view what) {
  if (v.kind_case() != google::protobuf::Value::kBoolValue) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is not a boolean"));
  }
  return v.bool_value();
}

absl::StatusOr<std::string> JsonString(const google::protobuf::Value& v, absl::string_view what) {
  if (v.kind_case() != google::protobuf::Value::kStringValue) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is not a string"));
  }
  return v.string_value();
}

}  // namespace tandem
