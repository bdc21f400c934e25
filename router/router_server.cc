#include "router/router_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "serving/server_runner.h"

namespace tandem {

absl::StatusOr<std::unique_ptr<RouterServer>> RouterServer::Start(
    const RouterOptions& options, std::unique_ptr<ServedModel> model, LogFn log,
    RouterAccess access) {
  if (absl::Status s = ValidateRouterOptions(options); !s.ok()) return s;
  std::unique_ptr<RouterServer> r(new RouterServer());
  r->model_ = std::move(model);
  r->access_ = std::move(access);
  std::shared_ptr<grpc::ChannelCredentials> node_credentials =
      GrpcChannelCredentials(r->access_.tls);
  r->pool_ = std::make_unique<NodePool>(r->model_->limits().name, options.prefill_policy,
                                        options.decode_policy, log,
                                        [node_credentials](const std::string& address) {
                                          return NodeChannel(address, node_credentials);
                                        });
  for (const std::string& address : options.prefill_nodes) {
    if (absl::Status s = r->pool_->AddStatic(address, v1::INSTANCE_ROLE_PREFILL); !s.ok()) {
      return s;
    }
  }
  for (const std::string& address : options.decode_nodes) {
    if (absl::Status s = r->pool_->AddStatic(address, v1::INSTANCE_ROLE_DECODE); !s.ok()) {
      return s;
    }
  }
  absl::StatusOr<RouterMetrics> metrics = RouterMetrics::Register(r->metrics_registry_);
  if (!metrics.ok()) return metrics.status();
  r->metrics_ = *metrics;
  r->deps_ = RouterDeps{r->model_.get(), r->pool_.get(), options, log, &r->request_counter_};
  r->deps_.metrics = &r->metrics_;
  r->deps_.draining = &r->draining_;
  r->deps_.in_flight = &r->in_flight_;
  r->deps_.max_in_flight = r->access_.max_requests_in_flight;
  r->deps_.api_keys = r->access_.api_keys.get();
  r->deps_.verifies_client_certs = r->access_.tls.verifies_peers();
  r->kv_releaser_ =
      std::make_unique<KvReleaser>(std::min(options.rpc_timeout, KvReleaser::kMaxTimeout), log);
  r->deps_.kv_releaser = r->kv_releaser_.get();
  // A poll must end before the next one would start, but a loaded node deserves a second.
  const absl::Duration poll_timeout =
      std::min(std::max(options.health_interval, absl::Seconds(1)), options.rpc_timeout);
  r->health_ =
      std::make_unique<HealthChecker>(r->pool_.get(), options.health_interval, poll_timeout);
  r->service_ = std::make_unique<RouterService>(&r->deps_, r->health_.get(), &r->threads_);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  GrpcServerSettings settings;
  settings.credentials = GrpcServerCredentials(r->access_.tls, ClientCertPolicy::kVerifyIfPresent);
  settings.max_concurrent_streams = r->access_.max_concurrent_streams;
  if (absl::Status s = ConfigureGrpcServer(builder, options.listen, settings, &r->port_); !s.ok()) {
    return s;
  }
  // A router relays every stream's tokens over few connections: gRPC's "throughput" target
  // writes what several streams queued in one go (router_capacity_bench, 2,000 gRPC streams:
  // p99 added latency lower in each of five alternating pairs; a lone stream's p50 unchanged).
  builder.AddChannelArgument(GRPC_ARG_OPTIMIZATION_TARGET, std::string(kRelayOptimizationTarget));
  builder.RegisterService(r->service_.get());
  r->server_ = builder.BuildAndStart();
  if (r->server_ == nullptr || r->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen));
  }
  log(absl::StrCat("serving model '", r->model_->limits().name, "' on port ", r->port_, " (",
                   options.prefill_nodes.size(), " static prefill, ", options.decode_nodes.size(),
                   " static decode nodes; policies ", PolicyKindName(options.prefill_policy), "/",
                   PolicyKindName(options.decode_policy), ")"));
  return r;
}

void RouterServer::Shutdown(absl::Duration grace) {
  if (shut_down_) return;
  shut_down_ = true;
  // Report NOT_SERVING on the health service first (load balancers and health probes stop
  // sending here), then refuse new requests (UNAVAILABLE from RunGenerate, on gRPC and HTTP
  // alike: a client moves to another router) and let the running ones finish within `grace`;
  // only then stop the gRPC server, so a call that arrives while the router drains is refused
  // with a clear status, not cancelled by the shutdown.
  if (server_ != nullptr && server_->GetHealthCheckService() != nullptr) {
    server_->GetHealthCheckService()->SetServingStatus(false);
  }
  draining_ = true;
  const absl::Time deadline = absl::Now() + grace;
  threads_.AwaitIdle(deadline);  // woken as the last request ends
  // Past the deadline gRPC cancels the remaining calls; their reactors' OnCancel cancels the
  // node calls, so every request thread ends and Shutdown returns.
  if (server_ != nullptr) server_->Shutdown(absl::ToChronoTime(std::max(deadline, absl::Now())));
  threads_.JoinAll();
  // The releases the last requests sent (each bounded by the releaser's timeout): the nodes free
  // their KV now rather than at lease expiry.
  kv_releaser_->WaitIdle(absl::Now() + kv_releaser_->timeout());
  health_.reset();
}

RouterServer::~RouterServer() { Shutdown(); }

}  // namespace tandem
