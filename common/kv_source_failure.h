// Blame as data (issue 27 item 3): a failure that is about the prefill node a decode node reads
// KV from — the source — rather than about the decode node itself carries a KvSourceFailure as a
// payload of its absl::Status. It is attached where the failure is detected (the decode node's
// pull, its calls to the prefill node), crosses gRPC with the status (serving/grpc_status.h
// carries payloads in the status details) and the router decides whom to blame from it alone:
// rewording an error never changes routing.
//
// Wrapping a status in a new message drops its payloads; a wrapper that keeps the cause's blame
// copies them with WithPayloadsOf.
//
// Pure (absl + nlohmann JSON), thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace tandem {

// The payload's type URL (absl::Status::SetPayload).
inline constexpr char kKvSourceFailureUrl[] = "type.tandem/tandem.KvSourceFailure";

struct KvSourceFailure {
  std::string prefill_address;  // the source's gRPC address; empty when not known here
  std::string engine_id;        // the source's KV engine id; empty when not known here
  std::vector<int32_t> ranks;   // source ranks at fault, ascending; empty: the whole node
};

// `status` with `failure` attached. An OK status stays OK (nothing to blame).
[[nodiscard]] absl::Status BlameKvSource(absl::Status status, const KvSourceFailure& failure);

// The failure attached to `status`; nullopt when none is (or it does not decode).
std::optional<KvSourceFailure> KvSourceFailureOf(const absl::Status& status);

// `to` with every payload of `from` that `to` lacks (for a wrapper that keeps its cause's data).
[[nodiscard]] absl::Status WithPayloadsOf(absl::Status to, const absl::Status& from);

}  // namespace tandem
