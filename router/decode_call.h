// One decode-family call run to its end: the one read loop behind the router's plain, colocated,
// pipelined and n-choices Decode calls (generate_driver*.cc). The caller builds the request and
// says what each event means through DecodeCallHooks; the runner starts the call on the
// NodeClient, stops it when the request's CancellationToken is cancelled, reads with the decode
// idle timeout between events, and reports how the call ended. What a failure means (retry, resume,
// whom to blame) stays with the caller, which knows the request's phase.
//
// Waits: at most `idle` between two events. With `first_event_by` set, the wait for the first
// event is instead bounded by that time (a pipelined call's first event waits for the whole
// prefill), and `before_first_event`, when set, runs before each wait until then (the pipelined
// watch of the prefill). That wait ends as soon as the call's stream or a stream the hook reads
// has something (both note their arrivals in one Arrivals: arrivals.h), not at a poll interval.
//
// Threads: RunDecodeCall runs on the request's thread and returns there, but the events after
// a pipelined call's first one are handed to the hooks as they arrive (NodeStream::Relay: with
// gRPC, on gRPC's thread, so a relayed token wakes no other thread) while the request's thread
// waits; one hook runs at a time and none after RunDecodeCall returned, so what the hooks touch
// (the request's state, its sink) is the request's as before. Hooks must not block.
#pragma once

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/cancellation.h"
#include "router/arrivals.h"
#include "router/clock.h"
#include "router/node_client.h"

namespace tandem {

// What the call does after an event.
enum class CallStep {
  kRead,    // read the next event
  kFinish,  // the finish event arrived: collect the final status, so the node sees a clean end
  kDrain,   // done at the first token: collect the node's finish event and the final status
  kCancel,  // stop the call now (the request is done with it)
};

struct DecodeCallHooks {
  // Every event but the first (and the first too when on_first_event is unset). An error fails
  // the call with it (a node that broke the protocol).
  std::function<absl::StatusOr<CallStep>(const v1::DecodeEvent&)> on_event;
  // The call's first event: the decode node has the KV (or, colocated, computed it).
  std::function<absl::StatusOr<CallStep>(const v1::DecodeEvent&)> on_first_event;
  // With first_event_by: runs before each wait for the first event, and must not block (it reads
  // its streams with a zero wait). kRead goes on waiting; anything else ends the call as that
  // step would. A stream it reads must note its arrivals in `arrivals` (NoteArrivalsIn), which
  // is what wakes the wait for it.
  std::function<CallStep()> before_first_event;
  // The counter the wait for the first event sleeps on; the runner has the call's stream note
  // it too. Null: the runner's own. REQUIRES: outlives the streams that note it.
  Arrivals* arrivals = nullptr;
};

struct DecodeCallSpec {
  NodeRef node;
  v1::DecodeRequest request;
  absl::Time deadline = absl::InfiniteFuture();  // the whole call's
  absl::Duration idle;                           // the decode idle timeout
  std::string request_id;                        // x-request-id
  absl::Time first_event_by = absl::InfiniteFuture();
  // DEADLINE_EXCEEDED's message when the first event is later than first_event_by.
  std::string first_event_late;
};

struct DecodeCallResult {
  // OK when the hooks ended the call; else why it ended early (the node's status, the idle
  // timeout, a clean end without a finish, a hook's error), as the node sent it.
  absl::Status failure;
  bool first_event = false;  // the node sent at least one event
  absl::Time first_event_at = absl::InfinitePast();
};

DecodeCallResult RunDecodeCall(NodeClient& client, Clock& clock, const CancellationToken& cancel,
                               DecodeCallSpec spec, const DecodeCallHooks& hooks);

// Why a stream ended before its finish event: nothing within `idle`, a clean end without a
// finish, or the call's error.
absl::Status StreamEndFailure(const DecodeEventStream::ReadResult& next, absl::Duration idle);

// A node call that ends CANCELLED while the client has not cancelled was cancelled by the node
// (its server shutting down as it drains, or its process going away): the node is unavailable,
// which the retry policy treats as such, rather than a cancellation to hand to the client.
absl::Status NodeSideCancelAsUnavailable(const absl::Status& status);

}  // namespace tandem
