// gRPC adapter of PrefillNode: converts tandem.v1 messages to domain calls and back. Each Prefill
// call also writes one log line (common/request_log.h) and, with SetMetrics, counts its prompt
// tokens.
#pragma once

#include <atomic>

#include "absl/time/time.h"
#include "common/cancel_poller.h"
#include "prefill_node/prefill_node.h"
#include "serving/drain_gate.h"
#include "serving/node_metrics.h"
#include "tandem/v1/prefill.grpc.pb.h"

namespace tandem {

// A WatchKv stream repeats the current progress this often while nothing changes, so the
// watcher can bound its wait for the next message (a stuck or vanished prefill node).
inline constexpr absl::Duration kWatchHeartbeat = absl::Milliseconds(500);

// Until SetNode() is called (the model is still loading) every RPC returns UNAVAILABLE.
class PrefillServiceImpl final : public v1::PrefillService::Service {
 public:
  void SetNode(PrefillNode* node) { node_.store(node); }
  // Draining: new Prefill calls get UNAVAILABLE, Status reports draining; WaitIdle tells when
  // the Prefill calls in flight have finished.
  DrainGate& drain_gate() { return drain_gate_; }
  // REQUIRES: called before the server starts; `metrics` outlives the service.
  void SetMetrics(const PrefillMetrics* metrics) { metrics_ = metrics; }

  grpc::Status Prefill(grpc::ServerContext* ctx, const v1::PrefillRequest* req,
                       v1::PrefillResponse* resp) override;
  // Pipelined transfer: streams a KvProgress (prefill.proto) whenever more of the prompt is
  // computed, and every kWatchHeartbeat while nothing changes, until the prefill ends, the
  // caller cancels or the call's deadline passes. One log line per call.
  grpc::Status WatchKv(grpc::ServerContext* ctx, const v1::WatchKvRequest* req,
                       grpc::ServerWriter<v1::KvProgress>* writer) override;
  grpc::Status ReleaseKv(grpc::ServerContext* ctx, const v1::ReleaseKvRequest* req,
                         v1::ReleaseKvResponse* resp) override;
  grpc::Status RenewLease(grpc::ServerContext* ctx, const v1::RenewLeaseRequest* req,
                          v1::RenewLeaseResponse* resp) override;
  grpc::Status GetTransferMetadata(grpc::ServerContext* ctx,
                                   const v1::GetTransferMetadataRequest* req,
                                   v1::TransferMetadata* resp) override;
  grpc::Status Status(grpc::ServerContext* ctx, const v1::StatusRequest* req,
                      v1::InstanceStatus* resp) override;

 private:
  // *cached_tokens: prompt tokens served from the prefix cache (for the log line).
  grpc::Status RunPrefill(grpc::ServerContext* ctx, const v1::PrefillRequest* req,
                          v1::PrefillResponse* resp, int64_t* cached_tokens);

  std::atomic<PrefillNode*> node_{nullptr};
  DrainGate drain_gate_;
  const PrefillMetrics* metrics_ = nullptr;
  // Turns each call's ServerContext::IsCancelled() into its CancellationToken.
  CancelPoller cancel_poller_;
};

}  // namespace tandem
