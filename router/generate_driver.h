// Runs one Router.Generate request on the calling thread: validate, tokenise, then prefill /
// decode (with retries and mid-stream resume decided by RequestState), streaming TokenChunks and
// the GenerateFinal to a sink. Returns the status the client receives.
//
// Every outgoing call has a deadline: unary calls min(now + rpc_timeout, client deadline);
// Decode min(client deadline, now + rpc_timeout + idle_timeout · (max_new_tokens + 1)) and, in
// between, at most idle_timeout between two events. Cancelling the request's CancellationToken
// (the reactor's or the HTTP handler's) stops the call in flight and every wait at once; the
// request then ends CANCELLED. If the request ends while the router still owns a prefill node's KV
// lease (cancelled or failed between Prefill and Decode, the first token was a stop id, max_tokens
// was 1, or a Decode call ended before taking the KV), ReleaseKv is sent to that node with its
// own deadline, independent of the client. If a Prefill call ends without the node's answer
// while a lease may exist (the router cancelled it, or it ended CANCELLED or DEADLINE_EXCEEDED:
// PrefillMayHaveLeased), the KvReleaser releases it by request id, off the request's thread.
//
// The node calls go through RouterDeps::nodes (a NodeClient: gRPC in production, an in-process
// fake in the driver's unit tests) and time through RouterDeps::clock.
//
// Thread-safety: RunGenerate may run on many threads at once; the dependencies are shared.
#pragma once

#include <grpcpp/support/status.h>

#include <atomic>
#include <cstdint>

#include "absl/time/time.h"
#include "common/cancellation.h"
#include "router/clock.h"
#include "router/generate_events.h"
#include "router/kv_releaser.h"
#include "router/node_client.h"
#include "router/node_pool.h"
#include "router/provenance.h"
#include "router/request_prep.h"
#include "router/router_log.h"
#include "router/router_metrics.h"
#include "router/router_options.h"
#include "router/served_model.h"
#include "serving/api_keys.h"
#include "tandem/v1/router.pb.h"

namespace tandem {

// Receives the request's events in order (generate_events.h): the Generate reactor's write
// queue, or an HTTP response.
class GenerateSink {
 public:
  virtual ~GenerateSink() = default;
  virtual void OnToken(GeneratedToken token) = 0;
  // n > 1 only. Default: nothing.
  virtual void OnChoiceEnd(ChoiceEnded /*end*/) {}
  // Once, last, when the request succeeded.
  virtual void OnDone(GenerateDone done) = 0;
  // Once, when the prompt's first successful prefill answered: the prompt tokens its prefix
  // cache served (as the final Usage.cached_tokens later says). Default: nothing.
  virtual void Prefilled(int32_t /*cached_tokens*/) {}
  // The request's provenance (provenance.h): once with final false just before the first token
  // is sent (what was known then), and once with final true when the request ends, successful
  // or not (after the GenerateFinal). Default: nothing.
  virtual void OnProvenance(const Provenance& /*provenance*/) {}
};

struct RouterDeps {
  const ServedModel* model = nullptr;
  NodePool* pool = nullptr;
  RouterOptions options;
  LogFn log;
  std::atomic<uint64_t>* request_counter = nullptr;  // for router-assigned request ids
  const RouterMetrics* metrics = nullptr;            // nullptr: nothing recorded
  // Set once the router drains (SIGTERM): RunGenerate refuses new requests with UNAVAILABLE so a
  // client retries another router. nullptr: never draining.
  const std::atomic<bool>* draining = nullptr;
  // Admission (docs/security.md): requests running in this router, gRPC and HTTP, and the most
  // allowed (--max_requests_in_flight; 0 = no limit). Beyond it RunGenerate refuses at once with
  // RESOURCE_EXHAUSTED (HTTP 429). nullptr: not counted.
  std::atomic<int64_t>* in_flight = nullptr;
  int64_t max_in_flight = 0;
  // The public APIs' keys (--api_keys_file); nullptr: no key needed. Checked by the gRPC service
  // and the HTTP API before a request reaches RunGenerate.
  const ApiKeys* api_keys = nullptr;
  // The gRPC server verifies client certificates (--tls_ca): Heartbeat then needs one.
  bool verifies_client_certs = false;
  // Releases the lease an abandoned Prefill call may have left (kv_releaser.h). nullptr: none is
  // sent, and such a lease expires after the prefill node's --lease_ms.
  KvReleaser* kv_releaser = nullptr;
  // Every node call goes through `nodes` (node_client.h); nullptr: gRPC (DefaultGrpcNodeClient).
  NodeClient* nodes = nullptr;
  // The driver's time: deadlines, backoffs, waits and timings. nullptr: RealClock().
  Clock* clock = nullptr;
};

// The gRPC API's request: a field this router does not know is refused (unknown_proto_fields.h).
grpc::Status RunGenerate(const RouterDeps& deps, const v1::GenerateRequest& request,
                         absl::Time client_deadline, const CancellationToken& cancel,
                         GenerateSink* sink);
// A request built without protobuf (the HTTP API's).
grpc::Status RunGenerate(const RouterDeps& deps, const GenerateInput& request,
                         absl::Time client_deadline, const CancellationToken& cancel,
                         GenerateSink* sink);

}  // namespace tandem
