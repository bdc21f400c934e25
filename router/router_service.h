// gRPC adapter of the router (tandem.v1.Router, callback API): Generate hands the request to a
// GenerateReactor (which runs RunGenerate on its own thread); ClusterStatus and Heartbeat
// translate to the NodePool. No routing logic lives here.
//
// Thread-safety: gRPC calls the methods concurrently; every dependency is thread-safe and must
// outlive the server.
#pragma once

#include "router/generate_driver.h"
#include "router/health_checker.h"
#include "router/node_pool.h"
#include "serving/call_threads.h"
#include "tandem/v1/router.grpc.pb.h"

namespace tandem {

class RouterService final : public v1::Router::CallbackService {
 public:
  RouterService(const RouterDeps* deps, HealthChecker* health, CallThreads* threads)
      : deps_(deps), health_(health), threads_(threads) {}

  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* context, const v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* ClusterStatus(grpc::CallbackServerContext* context,
                                          const v1::ClusterStatusRequest* request,
                                          v1::ClusterStatusResponse* response) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* context,
                                      const v1::HeartbeatRequest* request,
                                      v1::HeartbeatResponse* response) override;

 private:
  const RouterDeps* const deps_;
  HealthChecker* const health_;
  CallThreads* const threads_;
};

}  // namespace tandem
