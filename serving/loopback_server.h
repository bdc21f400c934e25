// A gRPC server on 127.0.0.1 at a free port, for the in-process fake nodes of tests and benches
// (tests/router/fake_nodes.h, bench/router/timed_nodes.h). Their unary calls answer with
// FinishUnary (serving/unary_reactors.h).
#pragma once

#include <grpcpp/server.h>
#include <grpcpp/server_context.h>
#include <grpcpp/support/server_callback.h>

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "serving/unary_reactors.h"

namespace tandem {

// Serves `service`; `*address` becomes "127.0.0.1:PORT". Null when the server did not start.
std::unique_ptr<grpc::Server> StartLoopbackServer(grpc::Service* service, std::string* address);

// Shuts `server` down (null: nothing), cancelling calls still open after `grace`.
void StopLoopbackServer(grpc::Server* server, absl::Duration grace);

}  // namespace tandem
