// What a decode node needs from the prefill instance holding a prompt's KV, independent of the
// wire: the transfer metadata it publishes, lease renewal, and the release of the KV. The gRPC
// implementation is GrpcPrefillClient (grpc_prefill_client.h, next to the service layer);
// node-level tests use an in-process fake (tests/decode_node/fake_prefill.h).
//
// KvHandle (kv/kv_handle.h) names the KV a call is about.
// Thread-safety: implementations are thread-safe (concurrent Decode calls share one client).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/cancellation.h"
#include "kv/kv_handle.h"
#include "kv_transfer/transfer_types.h"
#include "model/logprobs.h"

namespace tandem {

// One message of a pipelined prefill's progress (PrefillService.WatchKv).
struct KvProgressEvent {
  int64_t tokens_ready = 0;  // the prompt's first tokens_ready tokens have their KV complete
  bool done = false;         // the prefill finished; first_token is its sampled token
  int32_t first_token = 0;
  std::vector<uint32_t> kv_digests;  // with done: the KV digests (empty: digests off)
  // With done: first_token's log-probabilities, when the request asked for them.
  std::optional<TokenLogprobs> first_logprobs;
};

// A pipelined prefill's progress stream. Destroying it cancels the stream (bounded: it waits
// only for the stream to notice).
class KvWatch {
 public:
  virtual ~KvWatch() = default;
  // The newest progress received since the last call (messages in between are skipped: each
  // says at least as much as the one before), nullopt when none arrived within `timeout` or
  // `cancel` was cancelled first (the wait ends at once), or the stream's error (a clean end
  // without a done message is UNKNOWN). After an error or a done message, further calls return
  // that again.
  [[nodiscard]] virtual absl::StatusOr<std::optional<KvProgressEvent>> Next(
      absl::Duration timeout, const CancellationToken& cancel) = 0;
};

class PrefillClient {
 public:
  virtual ~PrefillClient() = default;

  // The metadata the prefill at `address` publishes now. UNAVAILABLE when it cannot be reached
  // by `deadline`; INVALID_ARGUMENT when what arrived is malformed.
  [[nodiscard]] virtual absl::StatusOr<TransferMetadata> GetTransferMetadata(
      const std::string& address, absl::Time deadline) = 0;

  // Extends kv's lease by the prefill's default lease. The new expiry, or nullopt when the lease
  // is no longer held (expired, released, or the prefill restarted). Errors: the call failed.
  [[nodiscard]] virtual absl::StatusOr<std::optional<absl::Time>> RenewLease(
      const KvHandle& kv, absl::Time deadline) = 0;

  // The prefill frees kv's blocks. Whether the lease was still held when it did (false: the KV
  // may have been overwritten; whatever was pulled must be discarded) — and, when kv carries
  // block_generations, whether none of its blocks was freed since (generation fencing).
  // Errors: the call failed.
  [[nodiscard]] virtual absl::StatusOr<bool> ReleaseKv(const KvHandle& kv, absl::Time deadline) = 0;

  // Pipelined transfer: watches the progress of the prefill still computing kv (an early
  // handle). The stream ends by `deadline` at the latest. Errors of the call itself (the node
  // unreachable, no such pipelined prefill) may come from here or from the first Next().
  [[nodiscard]] virtual absl::StatusOr<std::unique_ptr<KvWatch>> WatchKv(const KvHandle& kv,
                                                                         absl::Time deadline) = 0;
};

}  // namespace tandem
