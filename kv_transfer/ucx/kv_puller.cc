#include "kv_transfer/ucx/kv_puller.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "kv_transfer/ucx/transfer_checks.h"
#include "kv_transfer/ucx/ucx_status.h"

namespace tandem {
namespace {

// Longest single block on the worker's event fd: bounds how late a cancel flag is noticed.
constexpr absl::Duration kWaitSlice = absl::Milliseconds(10);

// Gets posted per turn of Execute's loop before it looks at the cancel flag, completions and
// endpoint errors again. On shared memory a get copies inside ucp_get_nbx, so this bounds the
// work between cancel checks (64 block-sized gets ≈ 128 MiB ≈ 20 ms here).
constexpr int32_t kPostsPerTurn = 64;

// Bytes of gathered pieces scattered per turn before the worker is progressed again.
constexpr int64_t kScatterBytesPerTurn = 64 * 1024;

// One outstanding get. UCX's completion callback (inside ucp_worker_progress, on Execute's
// thread) marks it done and queues its index on `done_list`; Execute frees it. The list is
// reserved for the whole window up front, so the callback never allocates.
struct GetSlot {
  void* request = nullptr;  // null while the slot is free
  int32_t src_rank = -1;
  int64_t copies = 0;    // planned copies the get carries (1, or a segment's)
  int64_t bytes = 0;     // their bytes
  int64_t segment = -1;  // index into the gather plan's segments, or -1 for a direct get
  int32_t staging = -1;  // staging slot of a segment get
  bool done = false;
  ucs_status_t status = UCS_OK;
  int32_t index = 0;
  std::vector<int32_t>* done_list = nullptr;
};

void OnGetDone(void* /*request*/, ucs_status_t status, void* user_data) {
  auto* slot = static_cast<GetSlot*>(user_data);
  slot->done = true;
  slot->status = status;
  slot->done_list->push_back(slot->index);
}

std::string SourceName(const TransferMetadata& m) {
  return absl::StrCat("engine '", m.engine_id, "' epoch ", m.epoch);
}

}  // namespace

absl::StatusOr<std::unique_ptr<UcxKvPuller>> UcxKvPuller::Create(
    const UcxKvPullerOptions& options) {
  const GatherOptions& g = options.gather;
  if (g.min_direct_bytes < 1 || g.max_segment_bytes < g.min_direct_bytes || g.max_gap_bytes < 0 ||
      options.staging_slots < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("UcxKvPullerOptions: need gather.min_direct_bytes >= 1 (got ",
                     g.min_direct_bytes, "), gather.max_segment_bytes >= min_direct_bytes (got ",
                     g.max_segment_bytes, "), gather.max_gap_bytes >= 0 (got ", g.max_gap_bytes,
                     ") and staging_slots >= 1 (got ", options.staging_slots, ")"));
  }
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<UcxContext> context, UcxContext::Create(options.ucx));
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<UcxWorker> worker,
                          UcxWorker::Create(std::shared_ptr<UcxContext>(std::move(context))));
  return std::unique_ptr<UcxKvPuller>(new UcxKvPuller(options, std::move(worker)));
}

UcxKvPuller::~UcxKvPuller() = default;

absl::StatusOr<std::unique_ptr<KvPoolMemory>> UcxKvPuller::AllocatePool(int64_t bytes) {
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<UcxPool> pool,
                          UcxPool::Create(worker_->context(), bytes));
  return std::unique_ptr<KvPoolMemory>(std::move(pool));
}

void UcxKvPuller::Forget(absl::string_view engine_id, uint64_t epoch) {
  absl::erase_if(connections_, [&](const auto& entry) {
    return std::get<0>(entry.first) == engine_id && std::get<1>(entry.first) == epoch;
  });
}

void UcxKvPuller::Drop(const TransferMetadata& source, int32_t rank) {
  connections_.erase(Key(source.engine_id, source.epoch, rank));
}

absl::StatusOr<RemoteRank*> UcxKvPuller::Connection(const TransferMetadata& source, int32_t rank,
                                                    bool* reused) {
  *reused = false;
  // A newer epoch of an engine means the old process is gone: its connections are stale.
  absl::erase_if(connections_, [&](const auto& entry) {
    return std::get<0>(entry.first) == source.engine_id && std::get<1>(entry.first) != source.epoch;
  });
  const Key key(source.engine_id, source.epoch, rank);
  const RankTransferInfo& info = source.ranks[rank];
  auto it = connections_.find(key);
  if (it != connections_.end() && it->second->error().ok() && it->second->ConnectedTo(info)) {
    *reused = true;
    return it->second.get();
  }
  if (it != connections_.end()) connections_.erase(it);
  TANDEM_ASSIGN_OR_RETURN(
      std::unique_ptr<RemoteRank> remote,
      RemoteRank::Connect(worker_.get(), info,
                          absl::StrCat("source rank ", rank, " of ", SourceName(source))));
  RemoteRank* raw = remote.get();
  connections_.emplace(key, std::move(remote));
  return raw;
}

absl::Status UcxKvPuller::Execute(const TransferMetadata& source,
                                  absl::Span<const TransferCopy> copies,
                                  absl::Span<std::byte> local_pool, const PullOptions& options) {
  const size_t blamed_before =
      options.failed_source_ranks != nullptr ? options.failed_source_ranks->size() : 0;
  bool stale = false;
  const absl::Status first = ExecuteOnce(source, copies, local_pool, options, &stale);
  if (!stale) return first;
  // A cached endpoint had failed before we used it: the others to this source likely did too
  // (one outage). Reconnect to every rank and pull once more; only this attempt's blame counts.
  Forget(source.engine_id, source.epoch);
  if (options.failed_source_ranks != nullptr) options.failed_source_ranks->resize(blamed_before);
  const absl::Status again = ExecuteOnce(source, copies, local_pool, options, &stale);
  if (again.ok()) return again;
  return absl::Status(
      again.code(),
      absl::StrCat(again.message(), " (retried on fresh endpoints after: ", first.message(), ")"));
}

absl::Status UcxKvPuller::ExecuteOnce(const TransferMetadata& source,
                                      absl::Span<const TransferCopy> copies,
                                      absl::Span<std::byte> local_pool, const PullOptions& options,
                                      bool* stale) {
  *stale = false;
  TANDEM_RETURN_IF_ERROR(
      ValidatePull(source, copies, static_cast<int64_t>(local_pool.size()), options));

  // Let UCX deliver endpoint errors it noticed while we were idle, so the cache evicts those
  // endpoints below instead of posting on them.
  worker_->ProgressAll();
  // Connect to every source rank the copies read before posting anything.
  std::vector<RemoteRank*> remote(source.ranks.size(), nullptr);
  std::vector<bool> reused(source.ranks.size(), false);
  for (const TransferCopy& c : copies) {
    if (remote[c.src_rank] == nullptr) {
      bool cached = false;
      absl::StatusOr<RemoteRank*> connected = Connection(source, c.src_rank, &cached);
      reused[c.src_rank] = cached;
      if (!connected.ok()) {
        if (options.failed_source_ranks != nullptr) {
          options.failed_source_ranks->push_back(c.src_rank);
        }
        return connected.status();
      }
      remote[c.src_rank] = *connected;
    }
  }

  // Pools UCX mapped into this process are read with memcpy; the rest with gets, small copies
  // gathered into segment reads (gather_plan.h).
  std::vector<const std::byte*> mapped(source.ranks.size(), nullptr);
  bool all_mapped = true;
  for (size_t rank = 0; rank < remote.size(); ++rank) {
    if (remote[rank] == nullptr) continue;
    if (options_.read_mapped_pools) mapped[rank] = remote[rank]->mapped_pool();
    if (mapped[rank] == nullptr) all_mapped = false;
  }
  GatherPlan gather;
  const bool gathering = options_.gather_small_copies && !all_mapped;
  if (gathering) {
    gather =
        PlanGather(copies, options_.gather, [&](int32_t rank) { return mapped[rank] == nullptr; });
  }
  const int64_t num_direct =
      gathering ? static_cast<int64_t>(gather.direct.size()) : static_cast<int64_t>(copies.size());
  const int64_t num_segments = static_cast<int64_t>(gather.segments.size());
  std::vector<int32_t> free_staging;
  if (num_segments > 0) {
    const int32_t staging_slots = options_.staging_slots;
    if (staging_ == nullptr) {
      staging_ = std::make_unique_for_overwrite<std::byte[]>(
          static_cast<size_t>(staging_slots) *
          static_cast<size_t>(options_.gather.max_segment_bytes));
    }
    const int32_t usable = static_cast<int32_t>(std::min<int64_t>(staging_slots, num_segments));
    for (int32_t s = usable - 1; s >= 0; --s) free_staging.push_back(s);
  }
  auto staging_slot = [&](int32_t s) {
    return staging_.get() + static_cast<int64_t>(s) * options_.gather.max_segment_bytes;
  };

  // Slots [0, max_in_flight) carry gets; slot max_in_flight + r carries the set-up flush of
  // source rank r's new endpoint (see the set-up flushes below), outside the get window.
  const int32_t num_ranks = static_cast<int32_t>(source.ranks.size());
  std::vector<GetSlot> slots(options.max_in_flight + num_ranks);
  std::vector<int32_t> free_slots(options.max_in_flight);
  std::vector<int32_t> done_slots;
  done_slots.reserve(slots.size());
  for (int32_t s = 0; s < options.max_in_flight; ++s) free_slots[s] = s;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = &OnGetDone;

  const int64_t n = static_cast<int64_t>(copies.size());
  int64_t next_direct = 0;   // into copies, or into gather.direct when gathering
  int64_t next_segment = 0;  // into gather.segments
  int64_t posted = 0;        // copies handed over (a segment's count when its get is posted)
  int64_t completed = 0;
  int64_t completed_bytes = 0;
  int32_t in_flight = 0;         // gets
  int32_t setups_in_flight = 0;  // set-up flushes
  bool cancelled = false;
  bool force_closed = false;
  absl::Status failure;
  absl::Time last_completion = absl::Now();
  absl::Time abandon_at = absl::InfiniteFuture();
  absl::Time idle_since = absl::InfiniteFuture();  // since when nothing happened; see the wait
  auto fail = [&failure](absl::Status status) {
    if (failure.ok()) failure = std::move(status);
  };
  // Source ranks a failure is blamed on, each once (options.failed_source_ranks).
  std::vector<int32_t> blamed;
  auto blame = [&blamed](int32_t rank) {
    if (std::find(blamed.begin(), blamed.end(), rank) == blamed.end()) blamed.push_back(rank);
  };
  auto peer_name = [&](int32_t rank) {
    return remote[rank] != nullptr ? remote[rank]->label()
                                   : absl::StrCat("source rank ", rank, " of ", SourceName(source));
  };
  auto finish = [&](int32_t rank, int64_t num_copies, int64_t bytes, ucs_status_t status) {
    if (status == UCS_OK) {
      completed += num_copies;
      completed_bytes += bytes;
      return;
    }
    // Gets cancelled by our own force-close land here too; `failure` already says why.
    if (!cancelled && failure.ok()) blame(rank);
    // Any other failed get means the endpoint is not to be trusted again.
    if (remote[rank] != nullptr) remote[rank]->MarkFailed(status);
    fail(absl::UnavailableError(
        absl::StrCat(num_copies == 0 ? "setting up the connection to " : "get from ",
                     peer_name(rank), ": ", ToStatus(status, "failed").message())));
  };
  // Segments whose get finished, scattered into place a bounded amount per turn (so the worker
  // is progressed between pieces of the work and a TCP stream keeps flowing); a segment's
  // copies complete, and its staging slot is freed, when its last piece is in place.
  struct PendingScatter {
    int64_t segment;
    int32_t staging;
    int64_t next_piece;
  };
  std::deque<PendingScatter> scatter_queue;
  auto scatter_some = [&](int64_t budget_bytes) {
    while (!scatter_queue.empty() && budget_bytes > 0) {
      PendingScatter& job = scatter_queue.front();
      const GatherSegment& seg = gather.segments[job.segment];
      const std::byte* from = staging_slot(job.staging);
      const int64_t end = seg.first_piece + seg.num_pieces;
      for (; job.next_piece < end && budget_bytes > 0; ++job.next_piece) {
        const GatherPiece& piece = gather.pieces[job.next_piece];
        std::memcpy(local_pool.data() + piece.dst_offset, from + piece.segment_offset,
                    static_cast<size_t>(piece.length));
        budget_bytes -= piece.length;
      }
      if (job.next_piece < end) return;
      free_staging.push_back(job.staging);
      finish(seg.src_rank, seg.copies, seg.copy_bytes, UCS_OK);
      scatter_queue.pop_front();
    }
  };
  // After a failure or a cancel the pool is discarded: pending scatters are dropped.
  auto drop_scatters = [&] {
    for (const PendingScatter& job : scatter_queue) free_staging.push_back(job.staging);
    scatter_queue.clear();
  };
  // A segment get finished with `status`.
  auto segment_done = [&](int64_t segment, int32_t staging, ucs_status_t status) {
    if (status == UCS_OK && failure.ok() && !cancelled) {
      scatter_queue.push_back(
          PendingScatter{segment, staging, gather.segments[segment].first_piece});
      return;
    }
    free_staging.push_back(staging);
    const GatherSegment& seg = gather.segments[segment];
    finish(seg.src_rank, seg.copies, seg.copy_bytes, status);
  };
  // Posts one get; a get UCX completes at once is finished here.
  auto post_get = [&](int32_t rank, std::byte* into, int64_t src_offset, int64_t length,
                      int64_t num_copies, int64_t bytes, int64_t segment, int32_t staging) {
    RemoteRank* r = remote[rank];
    const int32_t s = free_slots.back();
    param.user_data = &slots[s];
    ucs_status_ptr_t request =
        ucp_get_nbx(r->endpoint(), into, static_cast<size_t>(length),
                    r->pool_base() + static_cast<uint64_t>(src_offset), r->rkey(), &param);
    posted += num_copies;
    if (request == nullptr || UCS_PTR_IS_ERR(request)) {
      const ucs_status_t status = request == nullptr ? UCS_OK : UCS_PTR_STATUS(request);
      if (segment >= 0) {
        segment_done(segment, staging, status);
      } else {
        finish(rank, num_copies, bytes, status);
      }
      return;
    }
    free_slots.pop_back();
    slots[s] =
        GetSlot{request, rank, num_copies, bytes, segment, staging, false, UCS_OK, s, &done_slots};
    ++in_flight;
  };
  // Counters are published once per turn, not per get: tiny copies are common.
  auto publish = [&] {
    if (options.progress == nullptr) return;
    options.progress->posted.store(posted, std::memory_order_relaxed);
    options.progress->completed.store(completed, std::memory_order_relaxed);
    options.progress->completed_bytes.store(completed_bytes, std::memory_order_relaxed);
  };
  auto all_posted = [&] { return next_direct == num_direct && next_segment == num_segments; };
  // Whether the next piece of work could be started now.
  auto can_post = [&] {
    if (!failure.ok() || cancelled || all_posted()) return false;
    if (next_direct < num_direct) {
      const int64_t i = gathering ? gather.direct[next_direct] : next_direct;
      if (mapped[copies[i].src_rank] != nullptr) return true;
      return in_flight < options.max_in_flight;
    }
    return in_flight < options.max_in_flight && !free_staging.empty();
  };

  // A new endpoint in peer-failure mode is set up by a round trip: our wireup request, and the
  // source's reply over a connection the source opens back to this worker. Nothing but our own
  // progress completes it, and a pull that only reads mapped pools never waits on the endpoint,
  // so without this the set-up would stay half done until some later progress call (typically
  // the close loop at exit, just before this worker disappears). The source then fails to
  // connect back with its reply still queued, which UCX 1.13 treats as a fatal assertion in the
  // source process (docs/kv_transfer.md, "A puller's endpoints are wired up before use"). A
  // flush completes once the set-up has; it is awaited like a get (stall, cancel, failure).
  for (int32_t rank = 0; rank < num_ranks; ++rank) {
    if (remote[rank] == nullptr || reused[rank] || !remote[rank]->detects_peer_failure()) {
      continue;
    }
    const int32_t s = options.max_in_flight + rank;
    param.user_data = &slots[s];
    ucs_status_ptr_t request = ucp_ep_flush_nbx(remote[rank]->endpoint(), &param);
    if (request == nullptr || UCS_PTR_IS_ERR(request)) {
      finish(rank, 0, 0, request == nullptr ? UCS_OK : UCS_PTR_STATUS(request));
      continue;
    }
    slots[s] = GetSlot{request, rank, 0, 0, -1, -1, false, UCS_OK, s, &done_slots};
    ++setups_in_flight;
  }

  while (true) {
    if (!cancelled && options.cancel != nullptr &&
        options.cancel->load(std::memory_order_relaxed)) {
      cancelled = true;
    }
    // Post at most kPostsPerTurn per turn, so the cancel flag and endpoint errors are looked at
    // regularly even when copies complete at once (a mapped pool's memcpy; on shared memory UCX
    // also usually completes a get inside ucp_get_nbx and returns no request).
    const absl::Time post_start = options.progress != nullptr ? absl::Now() : absl::Time();
    const int64_t completed_before = completed;
    for (int32_t budget = kPostsPerTurn; budget > 0 && can_post(); --budget) {
      if (next_direct < num_direct) {
        const int64_t i = gathering ? gather.direct[next_direct] : next_direct;
        ++next_direct;
        const TransferCopy& c = copies[i];
        if (const std::byte* pool = mapped[c.src_rank]; pool != nullptr) {
          std::memcpy(local_pool.data() + c.dst_offset, pool + c.src_offset,
                      static_cast<size_t>(c.length));
          ++posted;
          finish(c.src_rank, 1, c.length, UCS_OK);
          continue;
        }
        post_get(c.src_rank, local_pool.data() + c.dst_offset, c.src_offset, c.length, 1, c.length,
                 -1, -1);
        continue;
      }
      const GatherSegment& seg = gather.segments[next_segment];
      const int32_t staging = free_staging.back();
      free_staging.pop_back();
      post_get(seg.src_rank, staging_slot(staging), seg.src_offset, seg.length, seg.copies,
               seg.copy_bytes, next_segment, staging);
      ++next_segment;
    }
    if (options.progress != nullptr) {
      options.progress->post_nanos.fetch_add(absl::ToInt64Nanoseconds(absl::Now() - post_start),
                                             std::memory_order_relaxed);
    }
    // Copies that completed inside the posting loop are progress too: the stall clock restarts.
    if (completed != completed_before) last_completion = absl::Now();
    publish();
    if (!failure.ok() || cancelled) drop_scatters();
    if (in_flight == 0 && setups_in_flight == 0) {
      if (!scatter_queue.empty()) {
        scatter_some(kScatterBytesPerTurn);
        continue;
      }
      if (all_posted() || !failure.ok() || cancelled) break;
      continue;  // everything posted so far completed at once: nothing to progress or wait for
    }

    const unsigned events = worker_->ProgressAll();
    const int32_t reaped = static_cast<int32_t>(done_slots.size());
    for (int32_t s : done_slots) {
      GetSlot& slot = slots[s];
      ucp_request_free(slot.request);
      slot.request = nullptr;
      if (s >= options.max_in_flight) {
        --setups_in_flight;
        finish(slot.src_rank, 0, 0, slot.status);
        continue;
      }
      free_slots.push_back(s);
      --in_flight;
      if (slot.segment >= 0) {
        segment_done(slot.segment, slot.staging, slot.status);
      } else {
        finish(slot.src_rank, slot.copies, slot.bytes, slot.status);
      }
    }
    done_slots.clear();
    scatter_some(kScatterBytesPerTurn);
    // The endpoint error callback runs inside ProgressAll; UCX fails that endpoint's gets too.
    for (size_t rank = 0; rank < remote.size(); ++rank) {
      if (remote[rank] != nullptr && !remote[rank]->error().ok()) {
        blame(static_cast<int32_t>(rank));
        fail(remote[rank]->error());
      }
    }
    const absl::Time now = absl::Now();
    if (reaped > 0) last_completion = now;
    if (in_flight == 0 && setups_in_flight == 0) continue;

    const bool stalled = now - last_completion >= options.stall_timeout;
    if (!force_closed && (stalled || cancelled)) {
      std::vector<int32_t> owing;
      for (const GetSlot& slot : slots) {
        if (slot.request != nullptr && !slot.done &&
            std::find(owing.begin(), owing.end(), slot.src_rank) == owing.end()) {
          owing.push_back(slot.src_rank);
        }
      }
      std::sort(owing.begin(), owing.end());
      if (!cancelled) {
        for (int32_t rank : owing) blame(rank);
        fail(absl::DeadlineExceededError(absl::StrCat(
            "KV transfer from ", SourceName(source), " stalled: no get completed for ",
            absl::FormatDuration(options.stall_timeout), "; ", in_flight, " gets",
            setups_in_flight > 0 ? absl::StrCat(" and ", setups_in_flight, " connection set-up(s)")
                                 : "",
            " outstanding to source rank(s) ", absl::StrJoin(owing, ","), " after ", completed,
            " of ", n, " copies")));
      }
      // Waiting longer is pointless (stalled) or unwanted (cancelled). Closing the endpoints
      // completes their outstanding gets with UCS_ERR_CANCELED (reaped on the next turns), so
      // nothing writes into local_pool after we return; the next Execute reconnects.
      for (int32_t rank : owing) {
        remote[rank] = nullptr;
        Drop(source, rank);
      }
      force_closed = true;
      abandon_at = now + RemoteRank::kCloseTimeout;
      continue;
    }
    if (now >= abandon_at) {
      // UCX did not complete gets on endpoints it force-closed. Hand the requests back (UCX
      // releases them when they finish) rather than hang; the caller discards the pool.
      bool staging_in_use = false;
      for (GetSlot& slot : slots) {
        if (slot.request != nullptr) {
          ucp_request_free(slot.request);
          staging_in_use = staging_in_use || slot.segment >= 0;
        }
        slot.request = nullptr;
      }
      // Such a get may still write into its staging slot: the buffer is abandoned (leaked on
      // purpose, never freed under UCX) and the next gathered pull allocates a new one.
      if (staging_in_use) static_cast<void>(staging_.release());
      done_slots.clear();
      break;
    }
    const bool idle = events == 0 && reaped == 0 && !can_post() && scatter_queue.empty();
    if (!idle) {
      idle_since = absl::InfiniteFuture();
    } else if (idle_since == absl::InfiniteFuture()) {
      idle_since = now;
    }
    // Poll a little before blocking: data that is already on its way (TCP replies stream in
    // back to back) is taken without an arm + poll round trip per batch.
    if (idle && now - idle_since >= options_.spin_before_wait) {
      const absl::Duration until_stall = options.stall_timeout - (now - last_completion);
      worker_->WaitForEvent(std::clamp(until_stall, absl::ZeroDuration(), kWaitSlice))
          .IgnoreError();  // a failed arm only means we poll again sooner
    }
  }
  publish();
  if (options.failed_source_ranks != nullptr && !cancelled) {
    options.failed_source_ranks->insert(options.failed_source_ranks->end(), blamed.begin(),
                                        blamed.end());
  }
  // A failed endpoint is never reused: the next Execute reconnects.
  for (size_t rank = 0; rank < remote.size(); ++rank) {
    if (remote[rank] != nullptr && !remote[rank]->error().ok()) {
      if (reused[rank] && failure.code() == absl::StatusCode::kUnavailable && !cancelled) {
        *stale = true;
      }
      Drop(source, static_cast<int32_t>(rank));
    }
  }
  if (cancelled) {
    return absl::CancelledError(absl::StrCat("KV transfer from ", SourceName(source),
                                             " cancelled after ", completed, " of ", n, " copies"));
  }
  return failure;
}

}  // namespace tandem
