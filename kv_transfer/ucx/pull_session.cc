#include "kv_transfer/ucx/pull_session.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kv_transfer/kv_pool_path.h"
#include "kv_transfer/ucx/transfer_checks.h"
#include "kv_transfer/ucx/ucx_status.h"

namespace tandem {
namespace {

// Longest single block on the worker's event fd (a cancel wakes it at once: Signal).
constexpr absl::Duration kWaitSlice = absl::Milliseconds(10);

// Gets posted per turn before the cancel token, completions and endpoint errors are looked at
// again. On shared memory a get copies inside ucp_get_nbx, so this bounds the work between
// cancel checks (64 block-sized gets ≈ 128 MiB ≈ 20 ms here).
constexpr int32_t kPostsPerTurn = 64;

// Bytes of gathered pieces scattered per turn before the worker is progressed again.
constexpr int64_t kScatterBytesPerTurn = 64 * 1024;

void OnGetDone(void* /*request*/, ucs_status_t status, void* user_data) {
  auto* slot = static_cast<UcxPullSession::Slot*>(user_data);
  slot->done = true;
  slot->status = status;
  slot->done_list->push_back(slot->index);
}

std::string SourceName(const TransferMetadata& m) {
  return absl::StrCat("engine '", m.engine_id, "' epoch ", m.epoch);
}

}  // namespace

UcxPullSession::UcxPullSession(UcxKvPuller* puller, const TransferMetadata& source,
                               absl::Span<const TransferCopy> copies,
                               absl::Span<std::byte> local_pool, const PullOptions& options)
    : puller_(puller),
      source_(source),
      copies_(copies),
      local_pool_(local_pool),
      options_(options),
      watchdog_(SourceName(source), static_cast<int64_t>(copies.size()), options.stall_timeout,
                RemoteRank::kCloseTimeout, options.cancel) {
  // A cancel from another thread wakes the wait on the worker's event fd (WaitIfIdle).
  if (options.cancel != nullptr) {
    wake_on_cancel_ =
        options.cancel->OnCancel([worker = puller_->worker_.get()] { worker->Signal(); });
  }
}

absl::Status UcxPullSession::Run(bool* stale) {
  *stale = false;
  TANDEM_RETURN_IF_ERROR(ValidatePull(source_, copies_, static_cast<int64_t>(local_pool_.size()),
                                      options_, LinkedUcxRkeyLayout()));
  TANDEM_RETURN_IF_ERROR(Connect());
  StartSetUps();
  while (true) {
    watchdog_.PollCancel();
    PostWindow();
    // After a failure or a cancel the pool is discarded: pending scatters are dropped.
    if (watchdog_.stopping()) DropScatters();
    if (!Outstanding()) {
      if (!scatter_queue_.empty()) {
        ScatterSome(kScatterBytesPerTurn);
        continue;
      }
      if (AllPosted() || watchdog_.stopping()) break;
      continue;  // everything posted so far completed at once: nothing to progress or wait for
    }
    const Turn turn = Reap();
    if (!Outstanding()) continue;
    const PullWatchdog::Action action =
        watchdog_.Check([this] { return Owing(); }, in_flight_, setups_in_flight_, completed_);
    if (action == PullWatchdog::Action::kForceClose) {
      ForceClose();
      continue;
    }
    if (action == PullWatchdog::Action::kAbandon) {
      Abandon();
      break;
    }
    WaitIfIdle(turn);
  }
  return Finish(stale);
}

absl::Status UcxPullSession::Connect() {
  UcxWorker* worker = puller_->worker_.get();
  const UcxKvPullerOptions& po = puller_->options_;
  // Let UCX deliver endpoint errors it noticed while we were idle, so the cache evicts those
  // endpoints below instead of posting on them.
  worker->ProgressAll();
  const size_t num_ranks = source_.ranks.size();
  remote_.assign(num_ranks, nullptr);
  reused_.assign(num_ranks, false);
  for (const TransferCopy& c : copies_) {
    if (remote_[c.src_rank] != nullptr) continue;
    bool cached = false;
    absl::StatusOr<RemoteRank*> connected = puller_->Connection(source_, c.src_rank, &cached);
    reused_[c.src_rank] = cached;
    if (!connected.ok()) {
      watchdog_.OnPeerFailed(c.src_rank, connected.status());
      return watchdog_.Finish(0, options_.failed_source_ranks);
    }
    remote_[c.src_rank] = *connected;
  }

  // Pools UCX mapped into this process are read with memcpy; the rest with gets, small copies
  // gathered into segment reads (gather_plan.h).
  // Device memory on either side (GPU-direct) moves only by get (PullAccessFor).
  const KvMemoryType local = puller_->local_memory();
  mapped_.assign(num_ranks, nullptr);
  std::vector<bool> gatherable(num_ranks, false);
  bool any_gatherable = false;
  for (size_t rank = 0; rank < num_ranks; ++rank) {
    if (remote_[rank] == nullptr) continue;
    const PullMemoryAccess access = PullAccessFor(local, source_.ranks[rank].memory_type);
    if (po.read_mapped_pools && access.memcpy_mapped) mapped_[rank] = remote_[rank]->mapped_pool();
    gatherable[rank] = access.gather && mapped_[rank] == nullptr;
    any_gatherable = any_gatherable || gatherable[rank];
  }
  gathering_ = po.gather_small_copies && any_gatherable;
  int64_t pull_bytes = 0;
  for (const TransferCopy& c : copies_) pull_bytes += c.length;
  stream_copies_ = pull_bytes >= po.stream_copy_min_bytes;
  if (gathering_) {
    gather_ = PlanGather(copies_, po.gather, [&](int32_t rank) { return gatherable[rank]; });
  }
  num_direct_ = gathering_ ? static_cast<int64_t>(gather_.direct.size())
                           : static_cast<int64_t>(copies_.size());
  num_segments_ = static_cast<int64_t>(gather_.segments.size());
  if (num_segments_ > 0) {
    if (puller_->staging_ == nullptr) {
      puller_->staging_ = std::make_unique_for_overwrite<std::byte[]>(
          static_cast<size_t>(po.staging_slots) * static_cast<size_t>(po.gather.max_segment_bytes));
    }
    const int32_t usable = static_cast<int32_t>(std::min<int64_t>(po.staging_slots, num_segments_));
    for (int32_t s = usable - 1; s >= 0; --s) free_staging_.push_back(s);
  }

  slots_.resize(options_.max_in_flight + num_ranks);
  free_slots_.resize(options_.max_in_flight);
  done_slots_.reserve(slots_.size());
  for (int32_t s = 0; s < options_.max_in_flight; ++s) free_slots_[s] = s;
  param_.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param_.cb.send = &OnGetDone;
  if (local == KvMemoryType::kCuda) {
    // Spares UCX detecting the local buffer's memory type on every get.
    param_.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    param_.memory_type = UCS_MEMORY_TYPE_CUDA;
  }
  return absl::OkStatus();
}

// A new endpoint in peer-failure mode is set up by a round trip: our wireup request, and the
// source's reply over a connection the source opens back to this worker. Nothing but our own
// progress completes it, and a pull that only reads mapped pools never waits on the endpoint,
// so without this the set-up would stay half done until some later progress call (typically
// the close loop at exit, just before this worker disappears). The source then fails to connect
// back with its reply still queued, which UCX 1.13 treats as a fatal assertion in the source
// process (docs/kv_transfer.md, "A puller's endpoints are wired up before use"). A flush
// completes once the set-up has; it is awaited like a get (stall, cancel, failure).
void UcxPullSession::StartSetUps() {
  const int32_t num_ranks = static_cast<int32_t>(remote_.size());
  for (int32_t rank = 0; rank < num_ranks; ++rank) {
    if (remote_[rank] == nullptr || reused_[rank] || !remote_[rank]->detects_peer_failure()) {
      continue;
    }
    const int32_t s = options_.max_in_flight + rank;
    param_.user_data = &slots_[s];
    ucs_status_ptr_t request = ucp_ep_flush_nbx(remote_[rank]->endpoint(), &param_);
    if (request == nullptr || UCS_PTR_IS_ERR(request)) {
      Complete(rank, 0, 0, request == nullptr ? UCS_OK : UCS_PTR_STATUS(request));
      continue;
    }
    slots_[s] = Slot{request, rank, 0, 0, -1, -1, false, UCS_OK, s, &done_slots_};
    ++setups_in_flight_;
  }
}

bool UcxPullSession::CanPost() const {
  if (watchdog_.stopping() || AllPosted()) return false;
  if (next_direct_ < num_direct_) {
    const int64_t i = gathering_ ? gather_.direct[next_direct_] : next_direct_;
    if (mapped_[copies_[i].src_rank] != nullptr) return true;
    return in_flight_ < options_.max_in_flight;
  }
  return in_flight_ < options_.max_in_flight && !free_staging_.empty();
}

// At most kPostsPerTurn per turn, so a cancel and endpoint errors are looked at regularly
// even when copies complete at once (a mapped pool's memcpy; on shared memory UCX also usually
// completes a get inside ucp_get_nbx and returns no request).
void UcxPullSession::PostWindow() {
  const absl::Time post_start = options_.progress != nullptr ? absl::Now() : absl::Time();
  const int64_t completed_before = completed_;
  for (int32_t budget = kPostsPerTurn; budget > 0 && CanPost(); --budget) {
    if (next_direct_ < num_direct_) {
      const int64_t i = gathering_ ? gather_.direct[next_direct_] : next_direct_;
      ++next_direct_;
      const TransferCopy& c = copies_[i];
      if (const std::byte* pool = mapped_[c.src_rank]; pool != nullptr) {
        // The bytes pass through this thread: their digest spans are CRCed in the same pass.
        CopyWithCrcs(local_pool_.data() + c.dst_offset, pool + c.src_offset, c.length,
                     options_.copy_crcs, i, stream_copies_);
        ++posted_;
        Complete(c.src_rank, 1, c.length, UCS_OK);
        continue;
      }
      PostGet(c.src_rank, local_pool_.data() + c.dst_offset, c.src_offset, c.length, 1, c.length,
              -1, -1);
      continue;
    }
    const GatherSegment& seg = gather_.segments[next_segment_];
    const int32_t staging = free_staging_.back();
    free_staging_.pop_back();
    PostGet(seg.src_rank, StagingSlot(staging), seg.src_offset, seg.length, seg.copies,
            seg.copy_bytes, next_segment_, staging);
    ++next_segment_;
  }
  if (options_.progress != nullptr) {
    options_.progress->post_nanos.fetch_add(absl::ToInt64Nanoseconds(absl::Now() - post_start),
                                            std::memory_order_relaxed);
  }
  // Copies that completed inside the posting loop are progress too: the stall clock restarts.
  if (completed_ != completed_before) watchdog_.OnCompletion();
  Publish();
}

void UcxPullSession::PostGet(int32_t rank, std::byte* into, int64_t src_offset, int64_t length,
                             int64_t num_copies, int64_t bytes, int64_t segment, int32_t staging) {
  RemoteRank* r = remote_[rank];
  const int32_t s = free_slots_.back();
  param_.user_data = &slots_[s];
  ucs_status_ptr_t request =
      ucp_get_nbx(r->endpoint(), into, static_cast<size_t>(length),
                  r->pool_base() + static_cast<uint64_t>(src_offset), r->rkey(), &param_);
  posted_ += num_copies;
  if (request == nullptr || UCS_PTR_IS_ERR(request)) {  // completed (or failed) at once
    const ucs_status_t status = request == nullptr ? UCS_OK : UCS_PTR_STATUS(request);
    if (segment >= 0) {
      SegmentDone(segment, staging, status);
    } else {
      Complete(rank, num_copies, bytes, status);
    }
    return;
  }
  free_slots_.pop_back();
  slots_[s] =
      Slot{request, rank, num_copies, bytes, segment, staging, false, UCS_OK, s, &done_slots_};
  ++in_flight_;
}

void UcxPullSession::Complete(int32_t rank, int64_t num_copies, int64_t bytes,
                              ucs_status_t status) {
  if (status == UCS_OK) {
    completed_ += num_copies;
    completed_bytes_ += bytes;
    return;
  }
  // Any failed get means the endpoint is not to be trusted again. Gets cancelled by our own
  // force-close land here too; the watchdog does not blame them.
  if (remote_[rank] != nullptr) remote_[rank]->MarkFailed(status);
  const std::string peer = remote_[rank] != nullptr
                               ? remote_[rank]->label()
                               : absl::StrCat("source rank ", rank, " of ", SourceName(source_));
  watchdog_.OnCopyFailed(rank, absl::UnavailableError(absl::StrCat(
                                   num_copies == 0 ? "setting up the connection to " : "get from ",
                                   peer, ": ", ToStatus(status, "failed").message())));
}

void UcxPullSession::SegmentDone(int64_t segment, int32_t staging, ucs_status_t status) {
  if (status == UCS_OK && !watchdog_.stopping()) {
    scatter_queue_.push_back(
        PendingScatter{segment, staging, gather_.segments[segment].first_piece});
    return;
  }
  free_staging_.push_back(staging);
  const GatherSegment& seg = gather_.segments[segment];
  Complete(seg.src_rank, seg.copies, seg.copy_bytes, status);
}

// Scattered a bounded amount per turn (so the worker is progressed between pieces of the work
// and a TCP stream keeps flowing); a segment's copies complete, and its staging slot is freed,
// when its last piece is in place.
void UcxPullSession::ScatterSome(int64_t budget_bytes) {
  while (!scatter_queue_.empty() && budget_bytes > 0) {
    PendingScatter& job = scatter_queue_.front();
    const GatherSegment& seg = gather_.segments[job.segment];
    const std::byte* from = StagingSlot(job.staging);
    const int64_t end = seg.first_piece + seg.num_pieces;
    for (; job.next_piece < end && budget_bytes > 0; ++job.next_piece) {
      const GatherPiece& piece = gather_.pieces[job.next_piece];
      std::memcpy(local_pool_.data() + piece.dst_offset, from + piece.segment_offset,
                  static_cast<size_t>(piece.length));
      budget_bytes -= piece.length;
    }
    if (job.next_piece < end) return;
    free_staging_.push_back(job.staging);
    Complete(seg.src_rank, seg.copies, seg.copy_bytes, UCS_OK);
    scatter_queue_.pop_front();
  }
}

void UcxPullSession::DropScatters() {
  for (const PendingScatter& job : scatter_queue_) free_staging_.push_back(job.staging);
  scatter_queue_.clear();
}

UcxPullSession::Turn UcxPullSession::Reap() {
  Turn turn;
  turn.events = puller_->worker_->ProgressAll();
  turn.reaped = static_cast<int32_t>(done_slots_.size());
  for (int32_t s : done_slots_) {
    Slot& slot = slots_[s];
    ucp_request_free(slot.request);
    slot.request = nullptr;
    if (s >= options_.max_in_flight) {
      --setups_in_flight_;
      Complete(slot.src_rank, 0, 0, slot.status);
      continue;
    }
    free_slots_.push_back(s);
    --in_flight_;
    if (slot.segment >= 0) {
      SegmentDone(slot.segment, slot.staging, slot.status);
    } else {
      Complete(slot.src_rank, slot.copies, slot.bytes, slot.status);
    }
  }
  done_slots_.clear();
  ScatterSome(kScatterBytesPerTurn);
  // The endpoint error callback runs inside ProgressAll; UCX fails that endpoint's gets too.
  for (size_t rank = 0; rank < remote_.size(); ++rank) {
    if (remote_[rank] != nullptr && !remote_[rank]->error().ok()) {
      watchdog_.OnPeerFailed(static_cast<int32_t>(rank), remote_[rank]->error());
    }
  }
  if (turn.reaped > 0) watchdog_.OnCompletion();
  return turn;
}

std::vector<int32_t> UcxPullSession::Owing() const {
  std::vector<int32_t> owing;
  for (const Slot& slot : slots_) {
    if (slot.request != nullptr && !slot.done &&
        std::find(owing.begin(), owing.end(), slot.src_rank) == owing.end()) {
      owing.push_back(slot.src_rank);
    }
  }
  return owing;
}

// Waiting longer is pointless (stalled) or unwanted (cancelled). Closing the endpoints completes
// their outstanding gets with UCS_ERR_CANCELED (reaped on the next turns), so nothing writes
// into local_pool after Run returns; the next Execute reconnects.
void UcxPullSession::ForceClose() {
  for (int32_t rank : Owing()) {
    remote_[rank] = nullptr;
    puller_->Drop(source_, rank);
  }
}

// UCX did not complete gets on endpoints it force-closed. Hand the requests back (UCX releases
// them when they finish) rather than hang; the caller discards the pool.
void UcxPullSession::Abandon() {
  bool staging_in_use = false;
  for (Slot& slot : slots_) {
    if (slot.request != nullptr) {
      ucp_request_free(slot.request);
      staging_in_use = staging_in_use || slot.segment >= 0;
    }
    slot.request = nullptr;
  }
  // Such a get may still write into its staging slot: the buffer is abandoned (leaked on
  // purpose, never freed under UCX) and the next gathered pull allocates a new one.
  if (staging_in_use) static_cast<void>(puller_->staging_.release());
  done_slots_.clear();
}

// Poll a little before blocking: data that is already on its way (TCP replies stream in back to
// back) is taken without an arm + poll round trip per batch.
void UcxPullSession::WaitIfIdle(const Turn& turn) {
  const absl::Time now = absl::Now();
  const bool idle = turn.events == 0 && turn.reaped == 0 && !CanPost() && scatter_queue_.empty();
  if (!idle) {
    idle_since_ = absl::InfiniteFuture();
    return;
  }
  if (idle_since_ == absl::InfiniteFuture()) idle_since_ = now;
  if (now - idle_since_ >= puller_->options_.spin_before_wait) {
    puller_->worker_->WaitForEvent(watchdog_.WaitBudget(kWaitSlice))
        .IgnoreError();  // a failed arm only means we poll again sooner
  }
}

absl::Status UcxPullSession::Finish(bool* stale) {
  Publish();
  absl::Status status = watchdog_.Finish(completed_, options_.failed_source_ranks);
  // A failed endpoint is never reused: the next Execute reconnects.
  for (size_t rank = 0; rank < remote_.size(); ++rank) {
    if (remote_[rank] != nullptr && !remote_[rank]->error().ok()) {
      if (reused_[rank] && watchdog_.failure().code() == absl::StatusCode::kUnavailable &&
          !watchdog_.cancelled()) {
        *stale = true;
      }
      puller_->Drop(source_, static_cast<int32_t>(rank));
    }
  }
  return status;
}

// Counters are published once per turn, not per get: tiny copies are common.
void UcxPullSession::Publish() {
  if (options_.progress == nullptr) return;
  options_.progress->posted.store(posted_, std::memory_order_relaxed);
  options_.progress->completed.store(completed_, std::memory_order_relaxed);
  options_.progress->completed_bytes.store(completed_bytes_, std::memory_order_relaxed);
}

std::byte* UcxPullSession::StagingSlot(int32_t s) const {
  return puller_->staging_.get() +
         static_cast<int64_t>(s) * puller_->options_.gather.max_segment_bytes;
}

}  // namespace tandem
