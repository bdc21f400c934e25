// NodeClient (node_client.h) over gRPC: each call on the NodeRef's channel, through the
// callback API, bounded by its deadline; streams are GrpcReadStreams, unary calls UnaryCalls.
//
// Thread-safety: stateless; shared by every request thread.
#pragma once

#include <memory>
#include <string>

#include "router/node_client.h"

namespace tandem {

class GrpcNodeClient final : public NodeClient {
 public:
  absl::StatusOr<v1::PrefillResponse> Prefill(const NodeRef& node, v1::PrefillRequest request,
                                              absl::Time deadline, const std::string& request_id,
                                              const CancellationToken* cancel) override;
  absl::Status ReleaseKv(const NodeRef& node, v1::ReleaseKvRequest request, absl::Time deadline,
                         const std::string& request_id) override;
  std::unique_ptr<DecodeEventStream> Decode(const NodeRef& node, v1::DecodeRequest request,
                                            absl::Time deadline,
                                            const std::string& request_id) override;
  std::unique_ptr<KvProgressStream> WatchKv(const NodeRef& node, v1::WatchKvRequest request,
                                            absl::Time deadline,
                                            const std::string& request_id) override;
};

// A process-wide GrpcNodeClient (the default when RouterDeps names none). Never null.
NodeClient* DefaultGrpcNodeClient();

}  // namespace tandem
