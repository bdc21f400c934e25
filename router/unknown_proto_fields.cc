#include "router/unknown_proto_fields.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/unknown_field_set.h"

namespace tandem {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

absl::Status Check(const Message& message, const std::string& path) {
  const Reflection* reflection = message.GetReflection();
  const google::protobuf::UnknownFieldSet& unknown = reflection->GetUnknownFields(message);
  if (!unknown.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, " has field number ", unknown.field(0).number(),
        ", which this router does not know: a newer client's field would be ignored, so the "
        "request is refused (upgrade the router)"));
  }
  std::vector<const FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);
  for (const FieldDescriptor* field : fields) {
    if (field->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) continue;
    const std::string child = absl::StrCat(path, ".", field->name());
    if (field->is_repeated()) {
      for (int i = 0; i < reflection->FieldSize(message, field); ++i) {
        if (absl::Status s = Check(reflection->GetRepeatedMessage(message, field, i),
                                   absl::StrCat(child, "[", i, "]"));
            !s.ok()) {
          return s;
        }
      }
    } else if (absl::Status s = Check(reflection->GetMessage(message, field), child); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RefuseUnknownFields(const Message& message) {
  return Check(message, message.GetDescriptor()->name());
}

}  // namespace tandem
