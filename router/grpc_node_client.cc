#include "router/grpc_node_client.h"

#include <grpcpp/channel.h>

#include <memory>
#include <utility>

#include "router/grpc_read_stream.h"
#include "router/unary_call.h"
#include "serving/request_id.h"
#include "tandem/v1/decode.grpc.pb.h"
#include "tandem/v1/prefill.grpc.pb.h"

namespace tandem {
namespace {

// A server-streaming `method` (a member of the stub's `async` class) of `stub` as a GrpcReadStream
// of Message (which keeps the stub until the call is done). `method`'s type is deduced as a whole:
// naming `Stub::async` in a dependent type is ambiguous (a class and a member function of that
// name), which clang rejects.
template <typename Message, typename Stub, typename Method, typename Request>
std::unique_ptr<NodeStream<Message>> StartStream(std::unique_ptr<Stub> owned_stub, Method method,
                                                 Request request, absl::Time deadline,
                                                 const std::string& request_id) {
  std::shared_ptr<Stub> stub = std::move(owned_stub);
  return std::make_unique<GrpcReadStream<Request, Message>>(
      [stub, method](grpc::ClientContext* ctx, const Request* req,
                     grpc::ClientReadReactor<Message>* reactor) {
        (stub->async()->*method)(ctx, req, reactor);
      },
      std::move(request), deadline, request_id);
}

}  // namespace

absl::StatusOr<v1::PrefillResponse> GrpcNodeClient::Prefill(const NodeRef& node,
                                                            v1::PrefillRequest request,
                                                            absl::Time deadline,
                                                            const std::string& request_id,
                                                            const CancellationToken* cancel) {
  UnaryCall<v1::PrefillRequest, v1::PrefillResponse> call(std::move(request), deadline);
  SetRequestIdMetadata(call.context(), request_id);
  auto stub = v1::PrefillService::NewStub(node.channel);
  call.Start([&stub](auto* ctx, auto* req, auto* resp, auto done) {
    stub->async()->Prefill(ctx, req, resp, std::move(done));
  });
  if (cancel == nullptr) return call.Wait();
  // TryCancel is thread-safe and does not block; the context outlives the callback's handle.
  const CancelCallback on_cancel =
      cancel->OnCancel([context = call.context()] { context->TryCancel(); });
  return call.Wait();
}

absl::Status GrpcNodeClient::ReleaseKv(const NodeRef& node, v1::ReleaseKvRequest request,
                                       absl::Time deadline, const std::string& request_id) {
  UnaryCall<v1::ReleaseKvRequest, v1::ReleaseKvResponse> call(std::move(request), deadline);
  SetRequestIdMetadata(call.context(), request_id);
  auto stub = v1::PrefillService::NewStub(node.channel);
  call.Start([&stub](auto* ctx, auto* req, auto* resp, auto done) {
    stub->async()->ReleaseKv(ctx, req, resp, std::move(done));
  });
  return call.Wait().status();
}

std::unique_ptr<DecodeEventStream> GrpcNodeClient::Decode(const NodeRef& node,
                                                          v1::DecodeRequest request,
                                                          absl::Time deadline,
                                                          const std::string& request_id) {
  return StartStream<v1::DecodeEvent>(v1::DecodeService::NewStub(node.channel),
                                      &v1::DecodeService::Stub::async::Decode, std::move(request),
                                      deadline, request_id);
}

std::unique_ptr<KvProgressStream> GrpcNodeClient::WatchKv(const NodeRef& node,
                                                          v1::WatchKvRequest request,
                                                          absl::Time deadline,
                                                          const std::string& request_id) {
  return StartStream<v1::KvProgress>(v1::PrefillService::NewStub(node.channel),
                                     &v1::PrefillService::Stub::async::WatchKv, std::move(request),
                                     deadline, request_id);
}

NodeClient* DefaultGrpcNodeClient() {
  static GrpcNodeClient* const client = new GrpcNodeClient();
  return client;
}

}  // namespace tandem
