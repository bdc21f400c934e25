// gRPC adapter of DecodeNode: Decode streams the engine's events to the caller; Status reports
// load. Until SetNode() is called (model loading) every RPC returns UNAVAILABLE. Each Decode call
// writes one log line (common/request_log.h) and, with SetMetrics, updates DecodeMetrics.
#pragma once

#include <atomic>
#include <optional>

#include "common/cancel_poller.h"
#include "decode_node/decode_node.h"
#include "serving/drain_gate.h"
#include "serving/node_metrics.h"
#include "tandem/v1/decode.grpc.pb.h"

namespace tandem {

class DecodeServiceImpl final : public v1::DecodeService::Service {
 public:
  void SetNode(DecodeNode* node) { node_.store(node); }
  // Draining: new Decode calls get UNAVAILABLE, Status reports draining; WaitIdle tells when
  // the Decode calls in flight have finished.
  DrainGate& drain_gate() { return drain_gate_; }
  // REQUIRES: called before the server starts; `metrics` outlives the service.
  void SetMetrics(const DecodeMetrics* metrics) { metrics_ = metrics; }

  grpc::Status Decode(grpc::ServerContext* ctx, const v1::DecodeRequest* req,
                      grpc::ServerWriter<v1::DecodeEvent>* writer) override;
  grpc::Status Status(grpc::ServerContext* ctx, const v1::StatusRequest* req,
                      v1::InstanceStatus* resp) override;

 private:
  // What one call's log line and metrics report, filled in as the call goes.
  struct DecodeRecord {
    absl::Time start = absl::Now();
    bool start_called = false;
    absl::Duration setup;  // DecodeNode::Start: capacity wait, handshake, pull, lease release
    std::optional<TransferStats> transfer;
    absl::Duration decode;  // from Start's return to the end of generation
    int32_t generated = 0;
    FinishReason reason = FinishReason::kLength;
  };
  grpc::Status RunDecode(grpc::ServerContext* ctx, const v1::DecodeRequest* req,
                         grpc::ServerWriter<v1::DecodeEvent>* writer, DecodeRecord* record);

  std::atomic<DecodeNode*> node_{nullptr};
  DrainGate drain_gate_;
  const DecodeMetrics* metrics_ = nullptr;
  // Turns each call's ServerContext::IsCancelled() into its CancellationToken.
  CancelPoller cancel_poller_;
};

}  // namespace tandem
