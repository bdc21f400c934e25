// The router's seam to its nodes: every call the Generate driver makes to a prefill or decode
// node (Prefill, Decode, WatchKv, ReleaseKv) goes through a NodeClient. GrpcNodeClient
// (grpc_node_client.h) makes them over gRPC; FakeNodeClient (router/fake/) answers them in
// process from a test's script, so the driver's retry, resume, blame and deadline logic is
// tested without sockets.
//
// A streaming call is a NodeStream: messages in order, then the end with the call's status,
// each read bounded by a wait. Destroying a stream cancels its call (safe at any time).
// Statuses are absl::Status with the node's payloads kept (serving/grpc_status.h), so blame
// (common/kv_source_failure.h) survives the seam.
//
// Thread-safety: a NodeClient may be used by many request threads at once. A stream is read
// (Read, Relay) from one thread; Cancel() may come from any thread (a request's
// CancellationToken callback: decode_call.h).
#pragma once

#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/cancellation.h"
#include "router/arrivals.h"
#include "tandem/v1/decode.pb.h"
#include "tandem/v1/prefill.pb.h"

namespace grpc {
class Channel;
}  // namespace grpc

namespace tandem {

// A node as the driver calls it: its address (what logs, blame and the fake key on) and the
// pool's channel to it (what the gRPC client calls; a fake ignores it, and it may be null).
struct NodeRef {
  std::string address;
  std::shared_ptr<grpc::Channel> channel;
};

template <typename Message>
class NodeStream {
 public:
  virtual ~NodeStream() = default;

  struct ReadResult {
    enum class Kind {
      kMessage,  // `message` holds the next message
      kEnd,      // the stream is over; `status` is its final status (OK: a clean end)
      kIdle,     // nothing arrived within the wait
    };
    Kind kind = Kind::kIdle;
    Message message;
    absl::Status status;
  };
  // Waits at most `wait` (zero: does not wait) for the next message or the end of the stream.
  virtual ReadResult Read(absl::Duration wait) = 0;

  // Asks the call to stop (from any thread; idempotent): it ends CANCELLED unless it already
  // ended. Must not block.
  virtual void Cancel() = 0;

  // From now on, each message or end that arrives also calls arrivals->Note() (arrivals.h), on
  // the transport's thread, so a reader can wait on several streams at once; null stops it. Call
  // from the reading thread. REQUIRES: `arrivals` outlives this stream, or is replaced first.
  virtual void NoteArrivalsIn(Arrivals* arrivals) = 0;

  // Hands the messages, in order, to `on_message` until it returns false, the stream ends, or
  // nothing arrives within `idle` of the last one (or of the call); then returns kMessage
  // (`on_message` stopped the relay; `message` is unset), kEnd with the stream's status, or
  // kIdle. Messages after a stop stay for Read. Blocks the caller until then; `on_message` may
  // run on another thread (the transport's, as each message arrives, so a relayed message
  // crosses no thread), one message at a time and never after Relay returned, so what it
  // touches is the caller's as before and after. This default reads on the caller's thread.
  virtual ReadResult Relay(absl::FunctionRef<bool(Message&)> on_message, absl::Duration idle) {
    while (true) {
      ReadResult next = Read(idle);
      if (next.kind != ReadResult::Kind::kMessage) return next;
      if (!on_message(next.message)) return ReadResult{ReadResult::Kind::kMessage, {}, {}};
    }
  }
};
using DecodeEventStream = NodeStream<v1::DecodeEvent>;
using KvProgressStream = NodeStream<v1::KvProgress>;

class NodeClient {
 public:
  virtual ~NodeClient() = default;
  // Every call carries `request_id` as x-request-id metadata (serving/request_id.h) and ends by
  // `deadline` (a unary call's waiter gives up a short grace after it: unary_call.h).

  // PrefillService.Prefill. `cancel` (may be null) stops it while it is in flight, and at once
  // when it is already cancelled.
  virtual absl::StatusOr<v1::PrefillResponse> Prefill(const NodeRef& node,
                                                      v1::PrefillRequest request,
                                                      absl::Time deadline,
                                                      const std::string& request_id,
                                                      const CancellationToken* cancel) = 0;
  // PrefillService.ReleaseKv; not cancellable (a cancelled client is when blocks must be freed).
  virtual absl::Status ReleaseKv(const NodeRef& node, v1::ReleaseKvRequest request,
                                 absl::Time deadline, const std::string& request_id) = 0;
  // DecodeService.Decode, started at once.
  virtual std::unique_ptr<DecodeEventStream> Decode(const NodeRef& node, v1::DecodeRequest request,
                                                    absl::Time deadline,
                                                    const std::string& request_id) = 0;
  // PrefillService.WatchKv (pipelined transfer), started at once.
  virtual std::unique_ptr<KvProgressStream> WatchKv(const NodeRef& node, v1::WatchKvRequest request,
                                                    absl::Time deadline,
                                                    const std::string& request_id) = 0;
};

}  // namespace tandem
