#include "router/router_service.h"

#include "absl/time/clock.h"
#include "router/generate_reactor.h"
#include "serving/grpc_status.h"

namespace tandem {

grpc::ServerWriteReactor<v1::GenerateResponse>* RouterService::Generate(
    grpc::CallbackServerContext* context, const v1::GenerateRequest* request) {
  return GenerateReactor::Start(context, request, deps_, threads_);
}

grpc::ServerUnaryReactor* RouterService::ClusterStatus(grpc::CallbackServerContext* context,
                                                       const v1::ClusterStatusRequest*,
                                                       v1::ClusterStatusResponse* response) {
  *response = deps_->pool->Snapshot(absl::Now());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* RouterService::Heartbeat(grpc::CallbackServerContext* context,
                                                   const v1::HeartbeatRequest* request,
                                                   v1::HeartbeatResponse*) {
  const absl::StatusOr<bool> added = deps_->pool->Heartbeat(
      request->address(), request->role(), absl::Milliseconds(request->ttl_ms()), absl::Now());
  if (added.ok() && *added) health_->PollNow();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(added.status()));
  return reactor;
}

}  // namespace tandem
