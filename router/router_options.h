// Configuration of a router process (flags in router/main.cc map 1:1 onto these fields).
// Pure; no I/O.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "router/node_policy.h"
#include "router/retry_policy.h"

namespace tandem {

struct RouterOptions {
  std::string listen = "0.0.0.0:50050";    // host:port; port 0 = any free port
  std::vector<std::string> prefill_nodes;  // static fleet; more may join by heartbeat
  std::vector<std::string> decode_nodes;
  // kv_aware is least_loaded until prefill nodes publish prefix-cache digests (node_policy.h).
  PolicyKind prefill_policy = PolicyKind::kKvAware;
  PolicyKind decode_policy = PolicyKind::kLeastLoaded;
  absl::Duration health_interval = absl::Seconds(1);       // Status poll period (and poll deadline)
  absl::Duration rpc_timeout = absl::Seconds(60);          // deadline of each unary call to a node
  absl::Duration decode_idle_timeout = absl::Seconds(30);  // max gap between decode events
  int max_attempts = 3;  // retryable node failures a request may take (the last is returned)
  RetryPolicy retry;     // backoff between attempts, wait for a healthy node (retry_policy.h)
  // Colocated serving: every request is one Decode call with the prompt to a decode node started
  // with --colocated_prefill=true, which prefills and decodes it on one instance (no prefill
  // nodes, no KV transfer). prefill_nodes must then be empty.
  bool colocated = false;
  // Pipelined transfer (docs/kv_transfer.md): a request's first Prefill call asks for an early
  // handle and the Decode call goes out at once, so the decode node pulls the KV chunk by chunk
  // while the prefill runs; resumes stay unpipelined. Needs nodes that support it (older prefill
  // nodes answer as usual and the request runs unpipelined). Not with colocated.
  bool pipelined_transfer = false;
  // Strict mode for every request (GenerateRequest.strict; provenance.h): a request fails instead
  // of re-prefilling after a failed KV transfer or resuming on another decode node.
  bool strict = false;
};

// INVALID_ARGUMENT naming the field: empty listen address, non-positive durations,
// max_attempts < 1, an empty entry in a node list, kv_aware for decode (decode nodes keep no
// prefix cache), prefill nodes or pipelined_transfer with colocated.
[[nodiscard]] absl::Status ValidateRouterOptions(const RouterOptions& options);

// "a:1,b:2" -> {"a:1", "b:2"}; surrounding spaces trimmed; "" -> {}. INVALID_ARGUMENT for an
// empty entry ("a:1,,b:2").
[[nodiscard]] absl::StatusOr<std::vector<std::string>> ParseAddressList(absl::string_view list);

}  // namespace tandem
