// The one translation from UCX's error space (ucs_status_t) to absl::Status. Every UCX call in
// Tandem reports failure through ToStatus so that codes mean the same thing everywhere:
//   * peer / link / endpoint failures (connection reset, unreachable, endpoint timeout, ...)
//     → UNAVAILABLE: the remote side is gone or cannot be reached; retry elsewhere.
//   * UCS_ERR_CANCELED → CANCELLED; UCS_ERR_TIMED_OUT → DEADLINE_EXCEEDED.
//   * bad parameters / addresses / rkeys → INVALID_ARGUMENT.
//   * memory and resource limits → RESOURCE_EXHAUSTED; unsupported → UNIMPLEMENTED.
// The message is "<what>: <ucs_status_string> (<code>)".
#pragma once

#include <ucs/type/status.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tandem {

// REQUIRES: nothing; UCS_OK and UCS_INPROGRESS map to OkStatus().
[[nodiscard]] absl::Status ToStatus(ucs_status_t status, absl::string_view what);

}  // namespace tandem
