#include "kv_transfer/ucx/kv_puller.h"

#include <algorithm>
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

// One outstanding get. UCX's completion callback (inside ucp_worker_progress, on Execute's
// thread) marks it done and queues its index on `done_list`; Execute frees it. The list is
// reserved for the whole window up front, so the callback never allocates.
struct GetSlot {
  void* request = nullptr;  // null while the slot is free
  int32_t src_rank = -1;
  int64_t length = 0;
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
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<UcxContext> context, UcxContext::Create(options.ucx));
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<UcxWorker> worker,
                          UcxWorker::Create(std::shared_ptr<UcxContext>(std::move(context))));
  return std::unique_ptr<UcxKvPuller>(new UcxKvPuller(std::move(worker)));
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

  std::vector<GetSlot> slots(options.max_in_flight);
  std::vector<int32_t> free_slots(options.max_in_flight);
  std::vector<int32_t> done_slots;
  done_slots.reserve(options.max_in_flight);
  for (int32_t s = 0; s < options.max_in_flight; ++s) free_slots[s] = s;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = &OnGetDone;

  const int64_t n = static_cast<int64_t>(copies.size());
  int64_t next = 0;
  int64_t completed = 0;
  int64_t completed_bytes = 0;
  int32_t in_flight = 0;
  bool cancelled = false;
  bool force_closed = false;
  absl::Status failure;
  absl::Time last_completion = absl::Now();
  absl::Time abandon_at = absl::InfiniteFuture();
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
  auto finish = [&](int32_t rank, int64_t length, ucs_status_t status) {
    if (status == UCS_OK) {
      ++completed;
      completed_bytes += length;
      return;
    }
    // Gets cancelled by our own force-close land here too; `failure` already says why.
    if (!cancelled && failure.ok()) blame(rank);
    // Any other failed get means the endpoint is not to be trusted again.
    if (remote[rank] != nullptr) remote[rank]->MarkFailed(status);
    fail(absl::UnavailableError(
        absl::StrCat("get from ", peer_name(rank), ": ", ToStatus(status, "failed").message())));
  };
  // Counters are published once per turn, not per get: tiny copies are common.
  auto publish = [&] {
    if (options.progress == nullptr) return;
    options.progress->posted.store(next, std::memory_order_relaxed);
    options.progress->completed.store(completed, std::memory_order_relaxed);
    options.progress->completed_bytes.store(completed_bytes, std::memory_order_relaxed);
  };

  while (true) {
    if (!cancelled && options.cancel != nullptr &&
        options.cancel->load(std::memory_order_relaxed)) {
      cancelled = true;
    }
    // Post at most kPostsPerTurn per turn, so the cancel flag and endpoint errors are looked at
    // regularly even when gets complete at once. On shared memory UCX usually completes a
    // get inside ucp_get_nbx (a copy out of the mapped pool) and returns no request.
    const absl::Time post_start = options.progress != nullptr ? absl::Now() : absl::Time();
    const int64_t completed_before = completed;
    for (int32_t budget = kPostsPerTurn;
         budget > 0 && failure.ok() && !cancelled && next < n && in_flight < options.max_in_flight;
         --budget) {
      const TransferCopy& c = copies[next++];
      RemoteRank* r = remote[c.src_rank];
      const int32_t s = free_slots.back();
      param.user_data = &slots[s];
      ucs_status_ptr_t request =
          ucp_get_nbx(r->endpoint(), local_pool.data() + c.dst_offset, c.length,
                      r->pool_base() + static_cast<uint64_t>(c.src_offset), r->rkey(), &param);
      if (request == nullptr) {
        finish(c.src_rank, c.length, UCS_OK);
      } else if (UCS_PTR_IS_ERR(request)) {
        finish(c.src_rank, c.length, UCS_PTR_STATUS(request));
      } else {
        free_slots.pop_back();
        slots[s] = GetSlot{request, c.src_rank, c.length, false, UCS_OK, s, &done_slots};
        ++in_flight;
      }
    }
    if (options.progress != nullptr) {
      options.progress->post_nanos.fetch_add(absl::ToInt64Nanoseconds(absl::Now() - post_start),
                                             std::memory_order_relaxed);
    }
    // Gets that completed inside ucp_get_nbx are progress too: the stall clock restarts.
    if (completed != completed_before) last_completion = absl::Now();
    publish();
    if (in_flight == 0) {
      if (next == n || !failure.ok() || cancelled) break;
      continue;  // everything posted so far completed at once: nothing to progress or wait for
    }

    const unsigned events = worker_->ProgressAll();
    const int32_t reaped = static_cast<int32_t>(done_slots.size());
    for (int32_t s : done_slots) {
      GetSlot& slot = slots[s];
      ucp_request_free(slot.request);
      slot.request = nullptr;
      free_slots.push_back(s);
      --in_flight;
      finish(slot.src_rank, slot.length, slot.status);
    }
    done_slots.clear();
    // The endpoint error callback runs inside ProgressAll; UCX fails that endpoint's gets too.
    for (size_t rank = 0; rank < remote.size(); ++rank) {
      if (remote[rank] != nullptr && !remote[rank]->error().ok()) {
        blame(static_cast<int32_t>(rank));
        fail(remote[rank]->error());
      }
    }
    const absl::Time now = absl::Now();
    if (reaped > 0) last_completion = now;
    if (in_flight == 0) continue;

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
        fail(absl::DeadlineExceededError(
            absl::StrCat("KV transfer from ", SourceName(source), " stalled: no get completed for ",
                         absl::FormatDuration(options.stall_timeout), "; ", in_flight,
                         " gets outstanding to source rank(s) ", absl::StrJoin(owing, ","),
                         " after ", completed, " of ", n, " copies")));
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
      for (GetSlot& slot : slots) {
        if (slot.request != nullptr) ucp_request_free(slot.request);
        slot.request = nullptr;
      }
      done_slots.clear();
      break;
    }
    const bool can_post =
        failure.ok() && !cancelled && next < n && in_flight < options.max_in_flight;
    if (events == 0 && reaped == 0 && !can_post) {
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
