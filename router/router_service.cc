#include "router/router_service.h"

#include <grpcpp/security/auth_context.h>

#include <string>

#include "absl/time/clock.h"
#include "router/generate_reactor.h"
#include "serving/grpc_status.h"

namespace tandem {
namespace {

// A Generate stream refused before it starts (no key): finishes at once, deletes itself.
class RefusedStream final : public grpc::ServerWriteReactor<v1::GenerateResponse> {
 public:
  explicit RefusedStream(grpc::Status status) { Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

bool HasValidKey(const grpc::CallbackServerContext& context, const ApiKeys& keys) {
  const auto& metadata = context.client_metadata();
  const auto it = metadata.find("authorization");
  if (it == metadata.end()) return false;
  return keys.Accepts(absl::string_view(it->second.data(), it->second.size()));
}

// A client certificate verified against --tls_ca (mutual TLS): nodes and operators' tools.
bool HasVerifiedCertificate(const grpc::CallbackServerContext& context) {
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  return auth != nullptr && auth->IsPeerAuthenticated();
}

grpc::Status Unauthenticated(const char* what) {
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, what);
}

}  // namespace

grpc::ServerWriteReactor<v1::GenerateResponse>* RouterService::Generate(
    grpc::CallbackServerContext* context, const v1::GenerateRequest* request) {
  if (deps_->api_keys != nullptr && !HasValidKey(*context, *deps_->api_keys)) {
    // Counted like every request that ends with an error (the HTTP API's 401 too).
    if (deps_->metrics != nullptr) deps_->metrics->RecordFailure("UNAUTHENTICATED");
    return new RefusedStream(
        Unauthenticated("missing or invalid API key: send metadata 'authorization: Bearer <key>'"));
  }
  return GenerateReactor::Start(context, request, deps_, threads_);
}

grpc::ServerUnaryReactor* RouterService::ClusterStatus(grpc::CallbackServerContext* context,
                                                       const v1::ClusterStatusRequest*,
                                                       v1::ClusterStatusResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // The fleet's addresses are not for strangers: an API key, or a certificate of the cluster.
  if (deps_->api_keys != nullptr && !HasValidKey(*context, *deps_->api_keys) &&
      !(deps_->verifies_client_certs && HasVerifiedCertificate(*context))) {
    reactor->Finish(Unauthenticated(
        "missing or invalid API key: send metadata 'authorization: Bearer <key>' (or a client "
        "certificate signed by the router's --tls_ca)"));
    return reactor;
  }
  *response = deps_->pool->Snapshot(absl::Now());
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* RouterService::Heartbeat(grpc::CallbackServerContext* context,
                                                   const v1::HeartbeatRequest* request,
                                                   v1::HeartbeatResponse*) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // A heartbeat adds a node to the fleet: under mutual TLS only a node of the cluster may.
  if (deps_->verifies_client_certs && !HasVerifiedCertificate(*context)) {
    reactor->Finish(Unauthenticated(
        "Heartbeat needs a client certificate signed by the router's --tls_ca (mutual TLS)"));
    return reactor;
  }
  const absl::StatusOr<bool> added = deps_->pool->Heartbeat(
      request->address(), request->role(), absl::Milliseconds(request->ttl_ms()), absl::Now());
  if (added.ok() && *added) health_->PollNow();
  reactor->Finish(ToGrpcStatus(added.status()));
  return reactor;
}

}  // namespace tandem
