// A running router: the served model, the node pool and its health checker, and the gRPC
// server exposing tandem.v1.Router plus the standard health service and reflection.
//
// Start binds options.listen (port 0 = any free port; port() tells which). Shutdown sets the
// gRPC health service NOT_SERVING, stops accepting requests (new ones get UNAVAILABLE, on gRPC
// and HTTP, and GET /health answers 503 "draining"), lets in-flight ones finish
// for `grace`, then stops the gRPC server and cancels what is left (their calls to
// nodes are cancelled, KV leases released) and waits for their threads; it is idempotent and
// also run by the destructor.
//
// Thread-safety: port(), model(), metrics() and deps() are safe from any thread; Shutdown from one
// thread.
#pragma once

#include <grpcpp/server.h>

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "router/generate_driver.h"
#include "router/health_checker.h"
#include "router/kv_releaser.h"
#include "router/node_pool.h"
#include "router/router_log.h"
#include "router/router_metrics.h"
#include "router/router_options.h"
#include "router/router_service.h"
#include "router/served_model.h"
#include "serving/api_keys.h"
#include "serving/call_threads.h"
#include "serving/tls_credentials.h"

namespace tandem {

// Who may use the router and how much (docs/security.md).
struct RouterAccess {
  // TLS of the gRPC server and of the channels to the nodes (mutual: the router's certificate is
  // their client certificate). With a CA the server verifies client certificates presented (not
  // required: public clients use API keys); Heartbeat then requires one.
  TlsConfig tls;
  std::shared_ptr<const ApiKeys> api_keys;  // nullptr: Generate/ClusterStatus need no key
  int max_concurrent_streams = 0;           // per client connection; 0 = gRPC default
  int64_t max_requests_in_flight = 0;       // gRPC + HTTP; 0 = no limit
};

class RouterServer {
 public:
  // INVALID_ARGUMENT for bad options or node lists; UNAVAILABLE when the address cannot be bound.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<RouterServer>> Start(
      const RouterOptions& options, std::unique_ptr<ServedModel> model, LogFn log = LogToStderr,
      RouterAccess access = {});

  ~RouterServer();
  RouterServer(const RouterServer&) = delete;
  RouterServer& operator=(const RouterServer&) = delete;

  int port() const { return port_; }
  const ServedModel& model() const { return *model_; }
  // The router's metrics (router/router_metrics.h), for GET /metrics:
  // RenderPrometheusText(server.metrics()) (common/prometheus_text.h).
  const MetricsRegistry& metrics() const { return metrics_registry_; }
  // What a request needs (model, node pool, options, metrics), for the HTTP API to run requests
  // exactly as Generate does (router/http/router_http.h).
  const RouterDeps& deps() const { return deps_; }
  void Shutdown(absl::Duration grace = absl::Seconds(5));

 private:
  RouterServer() = default;

  // Declaration order is destruction order reversed: the server goes first, then the request
  // threads, the health checker, the pool and the model they all use.
  std::unique_ptr<ServedModel> model_;
  MetricsRegistry metrics_registry_;
  RouterMetrics metrics_;
  std::unique_ptr<NodePool> pool_;
  std::atomic<uint64_t> request_counter_{0};
  std::atomic<bool> draining_{false};  // set by Shutdown: new requests are refused
  std::atomic<int64_t> in_flight_{0};  // requests in RunGenerate (admission limit)
  RouterAccess access_;
  RouterDeps deps_;
  // Before threads_: destroyed after every request thread that may use it has been joined.
  std::unique_ptr<KvReleaser> kv_releaser_;
  std::unique_ptr<HealthChecker> health_;
  // One per gRPC request; requests are bounded by --max_requests_in_flight in RunGenerate.
  CallThreads threads_{std::numeric_limits<int64_t>::max()};
  std::unique_ptr<RouterService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace tandem
