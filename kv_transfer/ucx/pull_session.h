// UcxPullSession: one attempt of UcxKvPuller::Execute (kv_puller.h), as phases
// (docs/design.md#pulling-kv):
//
//   Connect      validate, connect to every source rank the copies read (cached endpoints
//                reused), find mapped pools, plan the gather, reserve staging, post the set-up
//                flushes of new peer-mode endpoints;
//   PostWindow   up to kPostsPerTurn copies: memcpy from a mapped pool, or a get (direct or a
//                gathered segment) while the window has room;
//   Reap         progress the worker, free finished gets, scatter finished segments a bounded
//                amount, collect endpoint errors;
//   Close/abandon  what the PullWatchdog (kv_transfer/pull_watchdog.h) decides: force-close the
//                ranks still owed data (stall or cancel), or hand outstanding requests back to UCX
//                close_timeout later rather than hang;
//   Finish       report blame, drop failed endpoints, say whether a cached endpoint was stale.
//
// The stall / cancel / blame policy lives in the watchdog, which FakeKvPuller shares; this file
// only turns UCX events into watchdog events and the watchdog's decisions into UCX calls.
// Owns the window's slots and the scatter queue; borrows the puller (its worker, connection
// cache and staging buffer) for one Run. Thread-safety: the puller's thread only.
#pragma once

#include <ucp/api/ucp.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/cancellation.h"
#include "kv_transfer/gather_plan.h"
#include "kv_transfer/kv_puller.h"
#include "kv_transfer/pull_watchdog.h"
#include "kv_transfer/transfer_types.h"
#include "kv_transfer/ucx/kv_puller.h"
#include "kv_transfer/ucx/remote_rank.h"

namespace tandem {

class UcxPullSession {
 public:
  UcxPullSession(UcxKvPuller* puller, const TransferMetadata& source,
                 absl::Span<const TransferCopy> copies, absl::Span<std::byte> local_pool,
                 const PullOptions& options);
  UcxPullSession(const UcxPullSession&) = delete;
  UcxPullSession& operator=(const UcxPullSession&) = delete;

  // The whole attempt. *stale: it failed UNAVAILABLE on an endpoint that came from the cache.
  absl::Status Run(bool* stale);

  // One outstanding get (or set-up flush). UCX's completion callback (inside
  // ucp_worker_progress, on this thread) marks it done and queues its index on `done_list`,
  // reserved for the whole window up front so the callback never allocates.
  struct Slot {
    void* request = nullptr;  // null while the slot is free
    int32_t src_rank = -1;
    int64_t copies = 0;    // planned copies the get carries (1, or a segment's; 0: set-up)
    int64_t bytes = 0;     // their bytes
    int64_t segment = -1;  // index into the gather plan's segments, or -1 for a direct get
    int32_t staging = -1;  // staging slot of a segment get
    bool done = false;
    ucs_status_t status = UCS_OK;
    int32_t index = 0;
    std::vector<int32_t>* done_list = nullptr;
  };

 private:
  // What one Reap saw, for the idle decision.
  struct Turn {
    unsigned events = 0;
    int32_t reaped = 0;
  };
  // A segment whose get finished, scattered into place a bounded amount per turn.
  struct PendingScatter {
    int64_t segment;
    int32_t staging;
    int64_t next_piece;
  };

  // Phases.
  absl::Status Connect();
  void StartSetUps();
  void PostWindow();
  Turn Reap();
  void ForceClose();
  void Abandon();
  void WaitIfIdle(const Turn& turn);
  absl::Status Finish(bool* stale);

  // Pieces.
  bool Outstanding() const { return in_flight_ > 0 || setups_in_flight_ > 0; }
  bool AllPosted() const { return next_direct_ == num_direct_ && next_segment_ == num_segments_; }
  bool CanPost() const;
  std::vector<int32_t> Owing() const;
  void PostGet(int32_t rank, std::byte* into, int64_t src_offset, int64_t length,
               int64_t num_copies, int64_t bytes, int64_t segment, int32_t staging);
  // A get (or set-up, num_copies 0) of `rank` finished with `status`.
  void Complete(int32_t rank, int64_t num_copies, int64_t bytes, ucs_status_t status);
  void SegmentDone(int64_t segment, int32_t staging, ucs_status_t status);
  void ScatterSome(int64_t budget_bytes);
  void DropScatters();
  void Publish();
  std::byte* StagingSlot(int32_t s) const;

  UcxKvPuller* const puller_;
  const TransferMetadata& source_;
  const absl::Span<const TransferCopy> copies_;
  const absl::Span<std::byte> local_pool_;
  const PullOptions& options_;
  PullWatchdog watchdog_;

  std::vector<RemoteRank*> remote_;       // [source ranks]; null: not read, or force-closed
  std::vector<bool> reused_;              // [source ranks]: the connection came from the cache
  std::vector<const std::byte*> mapped_;  // [source ranks]: pool mapped here, or null
  bool stream_copies_ = false;            // memcpy from mapped_ with non-temporal stores
  GatherPlan gather_;
  bool gathering_ = false;
  int64_t num_direct_ = 0;
  int64_t num_segments_ = 0;
  std::vector<int32_t> free_staging_;
  std::deque<PendingScatter> scatter_queue_;

  // Slots [0, max_in_flight) carry gets; slot max_in_flight + r carries the set-up flush of
  // source rank r's new endpoint, outside the get window.
  std::vector<Slot> slots_;
  std::vector<int32_t> free_slots_;
  std::vector<int32_t> done_slots_;
  ucp_request_param_t param_{};

  int64_t next_direct_ = 0;   // into copies, or into gather.direct when gathering
  int64_t next_segment_ = 0;  // into gather.segments
  int64_t posted_ = 0;        // copies handed over (a segment's count when its get is posted)
  int64_t completed_ = 0;
  int64_t completed_bytes_ = 0;
  int32_t in_flight_ = 0;                           // gets
  int32_t setups_in_flight_ = 0;                    // set-up flushes
  absl::Time idle_since_ = absl::InfiniteFuture();  // since when nothing happened
  CancelCallback wake_on_cancel_;                   // last: unregistered before anything above goes
};

}  // namespace tandem
