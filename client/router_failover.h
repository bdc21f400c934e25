// Tandem's client side of several router replicas (docs/deployment.md, "Draining and rolling
// restarts"): a Generate call goes to one router of a list and moves to the next one when that
// router refuses it before answering, so a draining or stopped router costs a client nothing.
//
// Each call starts at the next router in turn (round robin over calls, so the load spreads over
// the replicas). When the router ends the call with UNAVAILABLE before any response arrived — a
// draining router ("router is draining"), a stopped one (connection refused), no healthy node
// behind it — or with CANCELLED before any response (a router whose server shut down while the
// call was just arriving: the client cannot have cancelled a call it saw nothing of, and its
// deadline ends calls with DEADLINE_EXCEEDED) — the same request goes to the next router; each
// router is tried at most once per call, and every attempt shares the call's deadline. A call that
// already received a response (a token or the final) is never sent again: the client has shown
// those tokens, and a second generation would repeat them. Every other status (INVALID_ARGUMENT,
// RESOURCE_EXHAUSTED, ...) is returned as it is; the last router's UNAVAILABLE is returned when
// every router refused.
//
// Thread-safety: Generate and ClusterStatus may run on many threads at once. The stubs are not
// owned and must outlive the RouterFailover.
#pragma once

#include <grpcpp/client_context.h>
#include <grpcpp/support/status.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "tandem/v1/router.grpc.pb.h"

namespace tandem {

// "a:1, b:2" -> {"a:1", "b:2"}; INVALID_ARGUMENT for an empty list or an empty entry.
[[nodiscard]] absl::StatusOr<std::vector<std::string>> ParseRouterList(absl::string_view list);

class RouterFailover {
 public:
  // With no router every call fails FAILED_PRECONDITION.
  explicit RouterFailover(std::vector<v1::Router::StubInterface*> routers);

  struct Outcome {
    grpc::Status status;
    int router = -1;   // index of the router that answered last (the one that served it, if ok)
    int refusals = 0;  // routers that refused the call (UNAVAILABLE before any response) first
  };
  // Called with each response as it arrives, on the calling thread; may cancel `ctx`.
  using OnResponse = std::function<void(const v1::GenerateResponse&, grpc::ClientContext& ctx)>;

  Outcome Generate(const v1::GenerateRequest& request, absl::Time deadline,
                   const OnResponse& on_response) const;
  // The first router (in turn) that answers; UNAVAILABLE from one moves on to the next.
  Outcome ClusterStatus(absl::Time deadline, v1::ClusterStatusResponse* response) const;

  size_t size() const { return routers_.size(); }

 private:
  static grpc::Status NoRouter();
  // The order of this call's attempts starts here.
  size_t NextStart() const;

  std::vector<v1::Router::StubInterface*> routers_;
  mutable std::atomic<uint64_t> next_{0};
};

}  // namespace tandem
