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

// Binds `listen` ("host:port", port 0 = any free port) and serves `services`.
absl::StatusOr<RunningServer> StartGrpcServer(const std::string& listen,
                                              const std::vector<grpc::Service*>& services);

// Writes "<port>\n" to `path` atomically (write + rename), so a reader never sees half a file.
absl::Status WritePortFile(const std::string& path, int port);

// Blocks until SIGINT or SIGTERM arrives. Call InstallShutdownSignals() first, before any
// thread is started, so the signals are blocked everywhere and delivered here.
void InstallShutdownSignals();
int WaitForShutdownSignal();

// "host:port" with the port replaced by `port` (for advertising after binding port 0).
std::string WithPort(const std::string& listen, int port);

}  // namespace tandem
