// A decode instance (DESIGN.md §1, §5, §6): a TP×DCP instance whose KV pools live in UCX (one
// KvPuller per rank), a DecodeEngine, and the handshake/transfer path that turns a prefill
// instance's KvHandle into local KV:
//
//   transfer metadata (cached per prefill engine id + epoch; compatibility hash checked once) →
//   blocks for prompt + max_new_tokens (waiting for capacity up to queue_timeout while renewing
//   the prefill's lease) → plan (kv_transfer/planner.h) → one-sided pulls per rank → ReleaseKv
//   → if the lease did not hold, discard and fail with ABORTED (the router prefills again) →
//   continuous-batched decode, tokens streamed through DecodeSink.
//
// Every failure frees the local blocks and, when this node still holds the prefill's KV lease,
// releases it. Thread-safety: all public methods are thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/block_manager.h"
#include "engine/decode_engine.h"
#include "engine/instance.h"
#include "kv_transfer/transfer_types.h"
#include "kv_transfer/ucx/kv_puller.h"
#include "tandem/v1/common.pb.h"
#include "tandem/v1/prefill.grpc.pb.h"

namespace tandem {

struct DecodeNodeOptions {
  std::string model_path;
  std::string model_name;
  std::string advertised_address;
  InstanceOptions instance;  // role forced to kDecode
  DecodeOptions decode;
  absl::Duration queue_timeout = absl::Seconds(30);  // waiting for KV capacity
  absl::Duration rpc_timeout = absl::Seconds(10);    // calls to prefill instances
  absl::Duration stall_timeout = absl::Seconds(10);  // KV pull without progress
  int32_t max_in_flight = 1024;  // gets outstanding per rank (64 starves small-row TCP pulls)
  UcxOptions ucx;
};

// Where a Decode call's events go. Called from the engine thread; must not block for long.
struct DecodeSink {
  std::function<void(int32_t token)> on_token;
  std::function<void(absl::Status status, FinishReason reason, int32_t generated)> on_done;
};

struct DecodeCall {
  std::string request_id;
  int32_t first_token = 0;
  v1::KvHandle kv;
  SamplingParams sampling;
  int32_t max_new_tokens = 1;
  std::vector<int32_t> stop_ids;
  uint64_t next_step = 1;
};

struct TransferStats {
  int64_t micros = 0;
  int64_t bytes = 0;
  int64_t copies = 0;
};

class DecodeNode {
 public:
  static absl::StatusOr<std::unique_ptr<DecodeNode>> Create(DecodeNodeOptions options);
  ~DecodeNode();
  DecodeNode(const DecodeNode&) = delete;
  DecodeNode& operator=(const DecodeNode&) = delete;

  // Pulls the KV and starts decoding. On OK the request is running and `sink.on_done` will be
  // called exactly once; on error nothing will be called. `cancelled` is polled while waiting
  // for capacity and pulling.
  absl::StatusOr<TransferStats> Start(const DecodeCall& call, DecodeSink sink,
                                      const std::function<bool()>& cancelled);
  bool Cancel(const std::string& request_id);

  const std::string& model_name() const { return model_name_; }
  const std::string& engine_id() const { return engine_id_; }
  const std::string& advertised_address() const { return options_.advertised_address; }
  KvLayout layout() const;
  int32_t free_blocks() const { return blocks_->free_blocks(); }
  int32_t total_blocks() const { return blocks_->total_blocks(); }
  int64_t block_free_errors() const { return blocks_->free_errors(); }
  int32_t running() const { return engine_->running(); }
  int32_t queued() const;
  absl::Time started() const { return started_; }

 private:
  explicit DecodeNode(DecodeNodeOptions options);
  absl::StatusOr<std::shared_ptr<const TransferMetadata>> Metadata(const v1::KvHandle& kv);
  v1::PrefillService::Stub* Prefill(const std::string& address);
  absl::StatusOr<std::vector<int32_t>> WaitForBlocks(const DecodeCall& call, int32_t count,
                                                     const std::function<bool()>& cancelled);
  absl::Status Pull(const TransferMetadata& source, const TransferPlan& plan,
                    const std::function<bool()>& cancelled);
  // Best effort: the prefill frees the KV; returns whether its lease held.
  absl::StatusOr<bool> ReleaseKv(const v1::KvHandle& kv);

  DecodeNodeOptions options_;
  std::string model_name_;
  std::string engine_id_;
  std::string identity_;
  LlamaConfig config_;
  absl::Time started_;

  std::vector<std::unique_ptr<UcxKvPuller>> pullers_;    // [world]; own the pools
  std::vector<std::unique_ptr<absl::Mutex>> puller_mu_;  // one pull at a time per rank
  std::unique_ptr<Instance> instance_;
  std::unique_ptr<BlockManager> blocks_;
  std::unique_ptr<DecodeEngine> engine_;

  mutable absl::Mutex mu_;
  std::map<std::pair<std::string, uint64_t>, std::shared_ptr<const TransferMetadata>> metadata_
      ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<v1::PrefillService::Stub>> stubs_ ABSL_GUARDED_BY(mu_);
  int32_t waiting_ ABSL_GUARDED_BY(mu_) = 0;  // calls waiting for capacity or pulling
};

}  // namespace tandem
