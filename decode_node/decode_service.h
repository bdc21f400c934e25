// gRPC adapter of DecodeNode (gRPC's callback API): Decode streams the engine's events to the
// caller; Status reports load. Until SetNode() is called (model loading) every RPC returns
// UNAVAILABLE. Each Decode call writes one log line (common/request_log.h) and, with SetMetrics,
// updates DecodeMetrics.
//
// Threads: Status answers on gRPC's callback thread. A Decode call blocks (DecodeNode::Start waits
// for KV capacity, the handshake and the pull; then it waits for the engine's events), so it runs
// on a thread of its own (serving/call_threads.h) and writes through a QueuedWriteReactor
// (serving/queued_write_reactor.h), whose OnCancel cancels the request's CancellationToken
// (docs/design.md#cancellation). Bounded: a call is admitted through the DrainGate first
// (--max_queued_requests waiting, plus what the engine runs), and at most `max_call_threads`
// run at once (RESOURCE_EXHAUSTED past that). A slow client holds back its call's thread (at most
// kDecodeWriteQueue events wait to be written); the engine's events wait for that thread in the
// call's own queue, at most max_new_tokens tokens per choice.
//
// Ownership: destroy the service after the gRPC server has shut down (that cancels and ends every
// call; the destructor joins the call threads), and the node after that.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "decode_node/decode_node.h"
#include "serving/call_threads.h"
#include "serving/drain_gate.h"
#include "serving/node_metrics.h"
#include "serving/queued_write_reactor.h"
#include "tandem/v1/decode.grpc.pb.h"

namespace tandem {

// Events of one Decode call that may wait to be written before its thread waits for the client.
inline constexpr size_t kDecodeWriteQueue = 16;

class DecodeServiceImpl final : public v1::DecodeService::CallbackService {
 public:
  explicit DecodeServiceImpl(int64_t max_call_threads = kDefaultMaxCallThreads)
      : threads_(max_call_threads) {}

  void SetNode(DecodeNode* node) { node_.store(node); }
  // Draining: new Decode calls get UNAVAILABLE, Status reports draining; WaitIdle tells when
  // the Decode calls in flight have finished.
  DrainGate& drain_gate() { return drain_gate_; }
  // REQUIRES: called before the server starts; `metrics` outlives the service.
  void SetMetrics(const DecodeMetrics* metrics) { metrics_ = metrics; }
  // Decode calls running on their threads now.
  int64_t calls_running() const { return threads_.running(); }

  grpc::ServerWriteReactor<v1::DecodeEvent>* Decode(grpc::CallbackServerContext* ctx,
                                                    const v1::DecodeRequest* req) override;
  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* ctx, const v1::StatusRequest* req,
                                   v1::InstanceStatus* resp) override;

 private:
  using Stream = QueuedWriteReactor<v1::DecodeEvent>;
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
  // The call's work, on its thread, once admitted.
  grpc::Status RunDecode(DecodeNode* node, const v1::DecodeRequest* req, Stream* stream,
                         DecodeRecord* record);
  // The call's metrics and log line, then the end of its stream.
  void EndCall(const grpc::CallbackServerContext* ctx, const v1::DecodeRequest* req,
               grpc::Status status, const DecodeRecord& record, Stream* stream);

  std::atomic<DecodeNode*> node_{nullptr};
  DrainGate drain_gate_;
  const DecodeMetrics* metrics_ = nullptr;
  CallThreads threads_;  // last: joined before the members above are destroyed
};

}  // namespace tandem
