#include "kv_transfer/ucx/ucx_status.h"

#include "absl/strings/str_cat.h"

namespace tandem {
namespace {

absl::StatusCode CodeFor(ucs_status_t status) {
  if (UCS_IS_LINK_ERROR(status) || UCS_IS_ENDPOINT_ERROR(status)) {
    return absl::StatusCode::kUnavailable;
  }
  switch (status) {
    case UCS_ERR_CANCELED:
      return absl::StatusCode::kCancelled;
    case UCS_ERR_TIMED_OUT:
      return absl::StatusCode::kDeadlineExceeded;
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_INVALID_ADDR:
    case UCS_ERR_MESSAGE_TRUNCATED:
    case UCS_ERR_BUFFER_TOO_SMALL:
    case UCS_ERR_OUT_OF_RANGE:
      return absl::StatusCode::kInvalidArgument;
    case UCS_ERR_NO_MEMORY:
    case UCS_ERR_NO_RESOURCE:
    case UCS_ERR_EXCEEDS_LIMIT:
      return absl::StatusCode::kResourceExhausted;
    case UCS_ERR_NOT_IMPLEMENTED:
    case UCS_ERR_UNSUPPORTED:
      return absl::StatusCode::kUnimplemented;
    case UCS_ERR_ALREADY_EXISTS:
      return absl::StatusCode::kAlreadyExists;
    case UCS_ERR_NO_ELEM:
      return absl::StatusCode::kNotFound;
    case UCS_ERR_BUSY:
      return absl::StatusCode::kFailedPrecondition;
    // The peer cannot be reached or went away: the caller should treat the source as down.
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_NO_DEVICE:
    case UCS_ERR_IO_ERROR:
    case UCS_ERR_SHMEM_SEGMENT:
    case UCS_ERR_SOME_CONNECTS_FAILED:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_NO_PROGRESS:
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kInternal;
  }
}

}  // namespace

absl::Status ToStatus(ucs_status_t status, absl::string_view what) {
  if (status == UCS_OK || status == UCS_INPROGRESS) return absl::OkStatus();
  return absl::Status(CodeFor(status), absl::StrCat(what, ": ", ucs_status_string(status), " (",
                                                    static_cast<int>(status), ")"));
}

}  // namespace tandem
