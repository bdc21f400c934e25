#include "kv_transfer/fake/fake_kv_puller.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kv_transfer/pull_watchdog.h"
#include "kv_transfer/ucx/transfer_checks.h"

namespace tandem::fake {
namespace {

std::string SourceName(const TransferMetadata& m) {
  return absl::StrCat("engine '", m.engine_id, "' epoch ", m.epoch);
}

// Waits until `until` (an injected stall or delay); false if cancelled first, woken at once.
bool SleepUnlessCancelled(absl::Time until, const PullOptions& options) {
  if (options.cancel == nullptr) {
    absl::SleepFor(until - absl::Now());
    return true;
  }
  return !options.cancel->WaitUntil(until);
}

}  // namespace

absl::StatusOr<std::unique_ptr<KvPoolMemory>> FakeKvPuller::AllocatePool(int64_t bytes) {
  if (bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("pool bytes must be > 0, got ", bytes));
  }
  return std::unique_ptr<KvPoolMemory>(new HeapPool(bytes));
}

absl::Status FakeKvPuller::Execute(const TransferMetadata& source,
                                   absl::Span<const TransferCopy> copies,
                                   absl::Span<std::byte> local_pool, const PullOptions& options) {
  TANDEM_RETURN_IF_ERROR(
      ValidatePull(source, copies, static_cast<int64_t>(local_pool.size()), options));
  const std::string& engine = source.engine_id;

  // "Connect" to every source rank the copies read before moving anything.
  std::vector<std::shared_ptr<HeapPool>> pools(source.ranks.size());
  for (const TransferCopy& c : copies) {
    if (pools[c.src_rank] != nullptr) continue;
    const RankTransferInfo& info = source.ranks[c.src_rank];
    absl::StatusOr<FakeKvNetwork::Endpoint> ep = network_->Resolve(engine, info.worker_address);
    if (!ep.ok()) {
      if (options.failed_source_ranks != nullptr)
        options.failed_source_ranks->push_back(c.src_rank);
      return absl::UnavailableError(absl::StrCat("source rank ", c.src_rank, " of ",
                                                 SourceName(source), ": ", ep.status().message()));
    }
    if (ep->info.pool_base != info.pool_base || ep->info.pool_bytes != info.pool_bytes ||
        ep->info.rkey != info.rkey) {
      return absl::InvalidArgumentError(absl::StrCat(
          "transfer metadata of ", SourceName(source), ": ranks[", c.src_rank,
          "] (pool_base, pool_bytes, rkey) is not what ", info.worker_address, " published"));
    }
    pools[c.src_rank] = ep->pool;
  }

  // Bytes a link lands itself never pass through the puller: nothing to CRC on the way.
  CopyCrcs* const crcs = network_->lands_bytes_itself(engine) ? nullptr : options.copy_crcs;
  network_->PullStarted(engine);
  absl::Cleanup finished = [&] { network_->PullFinished(engine); };
  const int64_t n = static_cast<int64_t>(copies.size());
  // The stall / cancel / blame decisions are UcxKvPuller's own (pull_watchdog.h). Copies are
  // sequential, so a close never has anything to wait for (close_timeout 0).
  PullWatchdog watchdog(SourceName(source), n, options.stall_timeout, absl::ZeroDuration(),
                        options.cancel);
  int64_t completed = 0;
  int64_t completed_bytes = 0;
  auto publish = [&](int64_t posted) {
    if (options.progress == nullptr) return;
    options.progress->posted.store(posted, std::memory_order_relaxed);
    options.progress->completed.store(completed, std::memory_order_relaxed);
    options.progress->completed_bytes.store(completed_bytes, std::memory_order_relaxed);
  };
  auto finish = [&] {
    publish(completed);
    return watchdog.Finish(completed, options.failed_source_ranks);
  };
  // Copy `rank`'s get is outstanding until the stall deadline: the watchdog decides.
  auto stalled = [&](int32_t rank) {
    const auto owing = [rank] { return std::vector<int32_t>{rank}; };
    watchdog.Check(owing, 1, 0, completed);
    return finish();
  };

  for (int64_t i = 0; i < n;) {
    if (watchdog.PollCancel()) return finish();
    const TransferCopy& c = copies[i];
    switch (network_->Admit(engine, c.length)) {
      case FakeKvNetwork::Verdict::kPaused:
        network_->AwaitResume(engine, watchdog.stall_deadline(), options.cancel);
        if (watchdog.PollCancel()) return finish();
        if (absl::Now() >= watchdog.stall_deadline()) return stalled(c.src_rank);
        continue;  // resumed: admit the same copy again
      case FakeKvNetwork::Verdict::kStall:
        if (!SleepUnlessCancelled(watchdog.stall_deadline(), options)) {
          watchdog.PollCancel();
          return finish();
        }
        return stalled(c.src_rank);
      case FakeKvNetwork::Verdict::kDead:
        watchdog.OnPeerFailed(
            c.src_rank,
            absl::UnavailableError(absl::StrCat(
                "get from source rank ", c.src_rank, " of ", SourceName(source),
                " failed: the peer died (injected) after ", completed, " of ", n, " copies")));
        return finish();
      case FakeKvNetwork::Verdict::kFail:
        watchdog.OnCopyFailed(
            c.src_rank, absl::UnavailableError(absl::StrCat("get from source rank ", c.src_rank,
                                                            " of ", SourceName(source),
                                                            " failed (injected, copy ", i, ")")));
        return finish();
      case FakeKvNetwork::Verdict::kShort: {
        const auto* from = static_cast<const std::byte*>(pools[c.src_rank]->base());
        std::memcpy(local_pool.data() + c.dst_offset, from + c.src_offset, c.length / 2);
        watchdog.OnFailure(absl::DataLossError(
            absl::StrCat("get from source rank ", c.src_rank, " of ", SourceName(source),
                         " completed ", c.length / 2, " of ", c.length, " bytes (copy ", i, ")")));
        return finish();
      }
      case FakeKvNetwork::Verdict::kCopy:
        break;
    }
    const auto* from = static_cast<const std::byte*>(pools[c.src_rank]->base());
    CopyWithCrcs(local_pool.data() + c.dst_offset, from + c.src_offset, c.length, crcs, i);
    ++completed;
    completed_bytes += c.length;
    ++i;
    watchdog.OnCompletion();
    publish(i);
    const absl::Duration delay = network_->copy_delay(engine);
    if (delay > absl::ZeroDuration() && !SleepUnlessCancelled(absl::Now() + delay, options)) {
      watchdog.PollCancel();
      return finish();
    }
  }
  return finish();
}

KvPullerFactory FakePullerFactory(FakeKvNetwork* network) {
  return [network](int32_t) -> absl::StatusOr<std::unique_ptr<KvPuller>> {
    return std::unique_ptr<KvPuller>(new FakeKvPuller(network));
  };
}

}  // namespace tandem::fake
