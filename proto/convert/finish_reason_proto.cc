#include "proto/convert/finish_reason_proto.h"

#include "absl/strings/str_cat.h"

namespace tandem {

v1::FinishReason ToProto(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return v1::FINISH_REASON_STOP;
    case FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case FinishReason::kCancelled:
      return v1::FINISH_REASON_CANCELLED;
    case FinishReason::kError:
      return v1::FINISH_REASON_ERROR;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

absl::StatusOr<FinishReason> FromProto(v1::FinishReason proto) {
  switch (proto) {
    case v1::FINISH_REASON_STOP:
      return FinishReason::kStop;
    case v1::FINISH_REASON_LENGTH:
      return FinishReason::kLength;
    case v1::FINISH_REASON_CANCELLED:
      return FinishReason::kCancelled;
    case v1::FINISH_REASON_ERROR:
      return FinishReason::kError;
    default:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat("finish reason ", static_cast<int>(proto),
                                                 proto == v1::FINISH_REASON_UNSPECIFIED
                                                     ? " (unspecified: the field is unset)"
                                                     : " is unknown to this build"));
}

}  // namespace tandem
