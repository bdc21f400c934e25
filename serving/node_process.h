// The life of an instance process around its node (shared by tandem-prefill and tandem-decode):
// the gRPC server starts first on --listen (the standard health service answering NOT_SERVING
// while the model loads), `start` creates the node for the advertised address and wires it into
// the service, then the process becomes ready (health SERVING, --port_file written), sends
// heartbeats to --router if given, and serves until SIGINT/SIGTERM. Then it drains: health
// NOT_SERVING, `start_drain` (the service refuses new work with UNAVAILABLE and its Status reports
// draining, so the router routes elsewhere), heartbeats stop, `wait_drained` waits up to
// --drain_timeout_s for in-flight work (and handed-out KV) to finish, the gRPC server shuts down
// (whatever is left past the timeout is cancelled), `stop` runs and the process exits 0.
//
// With `metrics` set and --metrics_listen non-empty, an HTTP server serves GET /metrics
// (Prometheus text of `metrics`) from start-up on, and --metrics_port_file gets its port; it is
// stopped before `stop`, so metric readers that point into the node never outlive it. /metrics
// stays plain HTTP under TLS (docs/security.md).
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "serving/tls_credentials.h"
#include "tandem/v1/common.pb.h"

namespace tandem {

struct NodeProcess {
  std::string program;  // for log lines, e.g. "tandem-prefill"
  grpc::Service* service = nullptr;
  v1::InstanceRole role = v1::INSTANCE_ROLE_UNSPECIFIED;
  // Creates the node serving at `advertise` and wires it into `service`; returns a one-line
  // description for the log ("serving M on A (...)").
  std::function<absl::StatusOr<std::string>(const std::string& advertise)> start;
  // Unwires and destroys the node (after the server has stopped).
  std::function<void()> stop;
  // On SIGTERM: from now on refuse new work and report draining (optional).
  std::function<void()> start_drain;
  // Blocks until the node's in-flight work is done, or `deadline`; true when done (optional).
  std::function<bool(absl::Time deadline)> wait_drained;
  // Served at /metrics on --metrics_listen (nullptr: no metrics endpoint).
  const MetricsRegistry* metrics = nullptr;
  // TLS of the gRPC server (clients must present a certificate signed by tls.ca_pem when it is
  // set: mutual TLS) and of the heartbeat channel; disabled = plaintext (NodeTlsFromFlags).
  TlsConfig tls;
};

// --tls_cert/--tls_key/--tls_ca, loaded and checked (serving/tls_credentials.h).
absl::StatusOr<TlsConfig> NodeTlsFromFlags();

// Call InstallShutdownSignals() before any thread starts, then this. Returns the exit code.
int RunNodeProcess(const NodeProcess& process);

}  // namespace tandem
