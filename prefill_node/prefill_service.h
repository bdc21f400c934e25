// gRPC adapter of PrefillNode (gRPC's callback API): converts tandem.v1 messages to domain calls
// and back. Each Prefill and WatchKv call also writes one log line (common/request_log.h) and,
// with SetMetrics, a Prefill counts its prompt tokens.
//
// Threads: ReleaseKv, RenewLease, GetTransferMetadata and Status do not block and answer on gRPC's
// callback thread. Prefill (waits for KV capacity and runs the model) and WatchKv (waits for the
// next chunk) block, so each runs on a thread of its own (serving/call_threads.h), with a reactor
// whose OnCancel cancels the call's CancellationToken (serving/unary_reactors.h,
// serving/queued_write_reactor.h; docs/design.md#cancellation). Bounded: a Prefill is admitted
// through the DrainGate first (--max_queued_requests waiting, plus what the engine runs); a
// WatchKv needs a pipelined prefill's live lease; and at most `max_call_threads` of both run at
// once (RESOURCE_EXHAUSTED past that). A WatchKv's thread waits for a slow client after one
// message (its messages are progress snapshots, each superseding the last).
//
// Ownership: destroy the service after the gRPC server has shut down (that cancels and ends every
// call; the destructor joins the call threads), and the node after that.
#pragma once

#include <atomic>
#include <cstdint>

#include "absl/time/time.h"
#include "prefill_node/prefill_node.h"
#include "serving/call_threads.h"
#include "serving/drain_gate.h"
#include "serving/node_metrics.h"
#include "serving/queued_write_reactor.h"
#include "tandem/v1/prefill.grpc.pb.h"

namespace tandem {

// A WatchKv stream repeats the current progress this often while nothing changes, so the
// watcher can bound its wait for the next message (a stuck or vanished prefill node).
inline constexpr absl::Duration kWatchHeartbeat = absl::Milliseconds(500);

// Until SetNode() is called (the model is still loading) every RPC returns UNAVAILABLE.
class PrefillServiceImpl final : public v1::PrefillService::CallbackService {
 public:
  explicit PrefillServiceImpl(int64_t max_call_threads = kDefaultMaxCallThreads)
      : threads_(max_call_threads) {}

  void SetNode(PrefillNode* node) { node_.store(node); }
  // Draining: new Prefill calls get UNAVAILABLE, Status reports draining; WaitIdle tells when
  // the Prefill calls in flight have finished.
  DrainGate& drain_gate() { return drain_gate_; }
  // REQUIRES: called before the server starts; `metrics` outlives the service.
  void SetMetrics(const PrefillMetrics* metrics) { metrics_ = metrics; }
  // Prefill and WatchKv calls running on their threads now.
  int64_t calls_running() const { return threads_.running(); }

  grpc::ServerUnaryReactor* Prefill(grpc::CallbackServerContext* ctx, const v1::PrefillRequest* req,
                                    v1::PrefillResponse* resp) override;
  // Pipelined transfer: streams a KvProgress (prefill.proto) whenever more of the prompt is
  // computed, and every kWatchHeartbeat while nothing changes, until the prefill ends, the
  // caller cancels or the call's deadline passes. One log line per call.
  grpc::ServerWriteReactor<v1::KvProgress>* WatchKv(grpc::CallbackServerContext* ctx,
                                                    const v1::WatchKvRequest* req) override;
  grpc::ServerUnaryReactor* ReleaseKv(grpc::CallbackServerContext* ctx,
                                      const v1::ReleaseKvRequest* req,
                                      v1::ReleaseKvResponse* resp) override;
  grpc::ServerUnaryReactor* RenewLease(grpc::CallbackServerContext* ctx,
                                       const v1::RenewLeaseRequest* req,
                                       v1::RenewLeaseResponse* resp) override;
  grpc::ServerUnaryReactor* GetTransferMetadata(grpc::CallbackServerContext* ctx,
                                                const v1::GetTransferMetadataRequest* req,
                                                v1::TransferMetadata* resp) override;
  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* ctx, const v1::StatusRequest* req,
                                   v1::InstanceStatus* resp) override;

 private:
  using Watch = QueuedWriteReactor<v1::KvProgress>;
  // What one WatchKv call's log line reports.
  struct WatchRecord {
    absl::Time start = absl::Now();
    KvProgressSnapshot seen{.tokens_ready = -1};
    int64_t messages = 0;
  };
  // A Prefill's work, on its thread, once admitted. *cached_tokens: prompt tokens served from
  // the prefix cache (for the log line).
  grpc::Status RunPrefill(PrefillNode* node, const grpc::CallbackServerContext* ctx,
                          const v1::PrefillRequest* req, const CancellationToken& cancel,
                          v1::PrefillResponse* resp, int64_t* cached_tokens);
  // A Prefill's metrics and log line.
  void LogPrefill(const grpc::CallbackServerContext* ctx, const v1::PrefillRequest* req,
                  const v1::PrefillResponse* resp, const grpc::Status& status, absl::Time start,
                  int64_t cached_tokens);
  // A WatchKv's messages until its end, on its thread.
  grpc::Status RunWatch(const KvProgress& progress, absl::Time deadline, Watch* stream,
                        WatchRecord* record);
  // A WatchKv's log line, then the end of its stream.
  void EndWatch(const grpc::CallbackServerContext* ctx, const v1::WatchKvRequest* req,
                grpc::Status status, const WatchRecord& record, Watch* stream);

  std::atomic<PrefillNode*> node_{nullptr};
  DrainGate drain_gate_;
  const PrefillMetrics* metrics_ = nullptr;
  CallThreads threads_;  // last: joined before the members above are destroyed
};

}  // namespace tandem
