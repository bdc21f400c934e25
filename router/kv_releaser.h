// Releases, off the request's thread, the KV lease a Prefill call the router gave up on may have
// left behind (PrefillMayHaveLeased, router/retry_policy.h): when the router cancels a Prefill
// call (client cancel, deadline, stop string) while the node's answer is already on its way, the
// node holds a lease nobody has the KvHandle of, and its blocks would stay held until the lease
// expires. ReleaseRequest sends ReleaseKv by request id (generation 0; if that prefill is still
// running, the node remembers the id until it ends: prefill_node/early_releases.h) and returns at
// once.
//
// Best effort: each call has its own deadline (`timeout`, independent of the client; the router
// uses min(--rpc_timeout_ms, kMaxTimeout)); a failure is logged, and the lease then expires as
// before. The destructor lets the calls in flight complete (they are bounded by the timeout),
// then cancels any left and waits kCallCompletionGrace more at most.
//
// Thread-safety: all methods are thread-safe.
#pragma once

#include <grpcpp/channel.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "router/router_log.h"

namespace tandem {

class KvReleaser {
 public:
  // A release is one small unary call: a node that cannot answer it within this is not helped by
  // waiting longer, and a router shutting down waits for the releases in flight.
  static constexpr absl::Duration kMaxTimeout = absl::Seconds(5);

  KvReleaser(absl::Duration timeout, LogFn log);
  ~KvReleaser();
  KvReleaser(const KvReleaser&) = delete;
  KvReleaser& operator=(const KvReleaser&) = delete;

  // Sends ReleaseKv{request_id = node_request_id, generation 0} to the prefill node `node` over
  // `channel`, with `request_id` as its x-request-id metadata and in the log.
  void ReleaseRequest(std::shared_ptr<grpc::Channel> channel, const std::string& node,
                      const std::string& node_request_id, const std::string& request_id);

  absl::Duration timeout() const { return timeout_; }
  // Calls sent and not yet completed.
  int in_flight() const;
  // Waits until none is in flight or `deadline` passes; true when none is.
  bool WaitIdle(absl::Time deadline) const;

 private:
  struct Call;
  // Shared with the calls' completion callbacks, so that it outlives a call whose completion
  // never came within the destructor's bound.
  struct Shared {
    LogFn log;
    mutable absl::Mutex mu;
    int in_flight ABSL_GUARDED_BY(mu) = 0;
    // Shared with ReleaseRequest while it starts the call (the completion may come first).
    std::vector<std::shared_ptr<Call>> running ABSL_GUARDED_BY(mu);
    // Freed by the next ReleaseRequest or the destructor, not on gRPC's callback thread (where
    // the last reference to a channel must not be dropped).
    std::vector<std::shared_ptr<Call>> completed ABSL_GUARDED_BY(mu);
  };
  static void Completed(const std::shared_ptr<Shared>& shared, Call* call);
  void FreeCompleted();

  const absl::Duration timeout_;
  const std::shared_ptr<Shared> shared_;
};

}  // namespace tandem
