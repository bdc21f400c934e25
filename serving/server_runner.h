// Process plumbing shared by tandem-prefill, tandem-decode and tandem-router: start a gRPC server
// with the standard health service and reflection, report the bound port (tests listen on
// 127.0.0.1:0 and read the port from a file), wait for SIGINT/SIGTERM, shut down with a deadline.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tandem {

struct RunningServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

// What a server accepts: its credentials (TLS / mutual TLS, serving/tls_credentials.h) and the
// most concurrent streams (calls) one client connection may have open; further calls on that
// connection wait in the client until one ends (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS).
struct GrpcServerSettings {
  std::shared_ptr<grpc::ServerCredentials> credentials;  // nullptr: insecure
  int max_concurrent_streams = 0;                        // 0: gRPC's default (no limit)
};

// Applies `settings` (and the keepalive policy the router's node channels need) to `builder`
// and adds the listening port. INVALID_ARGUMENT for max_concurrent_streams < 0.
absl::Status ConfigureGrpcServer(grpc::ServerBuilder& builder, const std::string& listen,
                                 const GrpcServerSettings& settings, int* port);

// Binds `listen` ("host:port", port 0 = any free port) and serves `services`.
absl::StatusOr<RunningServer> StartGrpcServer(const std::string& listen,
                                              const std::vector<grpc::Service*>& services,
                                              const GrpcServerSettings& settings = {});

// Writes "<port>\n" to `path` atomically (write + rename), so a reader never sees half a file.
absl::Status WritePortFile(const std::string& path, int port);

// Blocks until SIGINT or SIGTERM arrives. Call InstallShutdownSignals() first, before any
// thread is started, so the signals are blocked everywhere and delivered here.
void InstallShutdownSignals();
int WaitForShutdownSignal();

// "host:port" with the port replaced by `port` (for advertising after binding port 0).
std::string WithPort(const std::string& listen, int port);

}  // namespace tandem
