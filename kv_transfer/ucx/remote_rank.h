// RemoteRank: a destination worker's connection to one source rank — the endpoint and the
// unpacked rkey of that rank's pool (docs/design.md#pulling-kv: cached per destination rank and
// source rank).
//
// Error handling: the endpoint asks for UCP_ERR_HANDLING_MODE_PEER when the worker's context
// has a transport that can detect peer failure (TCP): UCX then calls our error callback (inside
// ucp_worker_progress, on the worker's thread), error() turns non-OK, outstanding operations
// complete with an error, and the owner must drop this object. UCX 1.13's shared-memory
// transports cannot detect peer failure and refuse PEER mode as "unreachable", so with only
// those (or when PEER mode finds the peer unreachable) the endpoint uses
// UCP_ERR_HANDLING_MODE_NONE. That is safe for Tandem's pools: shared-memory gets are loads from
// a segment this process has mapped, which stays valid after the source dies (the stall
// timeout still bounds anything that would wait on the peer).
//
// Mapped pools: when the rkey was unpacked through a shared-memory transport, UCX has attached the
// source's pool segment to this process and ucp_rkey_ptr turns a remote address into a local
// one. mapped_pool() is then the local address of the whole pool (checked at both ends), and
// a puller may read it with memcpy instead of a get per copy — what UCX's own shared-memory get
// does, minus the per-operation overhead. Null over TCP (and whenever UCX cannot map the pool).
// The mapping lives as long as the rkey, i.e. this object.
//
// Ownership: owns the endpoint and the rkey; borrows the worker, which must outlive it.
// Destruction destroys the rkey and closes the endpoint — forcibly in PEER mode (outstanding
// operations complete with UCS_ERR_CANCELED, the peer is not waited for), by flushing in NONE
// mode (UCX documents force-close as undefined without peer error handling) — progressing the
// worker until the close finishes, bounded by kCloseTimeout. Thread-safety: only on the worker's
// thread.
#pragma once

#include <ucp/api/ucp.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kv_transfer/transfer_types.h"
#include "kv_transfer/ucx/transfer_checks.h"
#include "kv_transfer/ucx/ucx_worker.h"

namespace tandem {

// The packed-rkey layout of the UCX this process linked (ucp_get_version): what Connect's
// ucp_ep_rkey_unpack will read, for ValidatePackedRkeyShape.
PackedRkeyLayout LinkedUcxRkeyLayout();

class RemoteRank {
 public:
  static constexpr absl::Duration kCloseTimeout = absl::Seconds(2);

  // `label` names the peer in every error ("source rank 1 of engine 'p0' epoch 3").
  // REQUIRES: info passed ValidateTransferMetadata(..., LinkedUcxRkeyLayout()).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<RemoteRank>> Connect(
      UcxWorker* worker, const RankTransferInfo& info, std::string label);
  ~RemoteRank();
  RemoteRank(const RemoteRank&) = delete;
  RemoteRank& operator=(const RemoteRank&) = delete;

  ucp_ep_h endpoint() const { return endpoint_; }
  ucp_rkey_h rkey() const { return rkey_; }
  uint64_t pool_base() const { return pool_base_; }
  // Local address of the source pool's first byte, or null (see "Mapped pools" above).
  const std::byte* mapped_pool() const { return mapped_pool_; }
  const std::string& label() const { return label_; }

  // OK while healthy; UNAVAILABLE naming the peer after UCX reported the endpoint failed (its
  // error callback) or an operation on it failed with an endpoint error (MarkFailed). An owner
  // that caches connections must evict a RemoteRank whose error() is not OK and connect afresh:
  // UCX never recovers a failed endpoint (after a network outage every later get on it fails,
  // e.g. "Endpoint timeout").
  const absl::Status& error() const { return error_; }

  // Records that an operation on this endpoint failed with `status` (no-op for UCS_OK and for
  // UCS_ERR_CANCELED, which our own close causes). The first failure is kept.
  void MarkFailed(ucs_status_t status);

  // Whether UCX reports this peer's failure (PEER mode) or cannot (NONE mode, shared memory).
  bool detects_peer_failure() const { return peer_mode_; }

  // True iff this connection was made from exactly this rank info (same epoch can only
  // republish identical info; anything else means the cache entry is stale).
  bool ConnectedTo(const RankTransferInfo& info) const;

 private:
  RemoteRank(UcxWorker* worker, const RankTransferInfo& info, std::string label);
  ucs_status_t CreateEndpoint(const void* address, bool peer_mode);
  static void OnEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status);

  UcxWorker* const worker_;
  const std::string worker_address_;
  const std::string packed_rkey_;
  const uint64_t pool_base_;
  const std::string label_;
  ucp_ep_h endpoint_ = nullptr;
  ucp_rkey_h rkey_ = nullptr;
  const std::byte* mapped_pool_ = nullptr;
  bool peer_mode_ = false;
  absl::Status error_;
};

}  // namespace tandem
