#include "kv_transfer/ucx/kv_puller.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kv_transfer/ucx/pull_session.h"

namespace tandem {
namespace {

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
  if (options.device_pools && options.device_pool_memory == KvMemoryType::kCuda &&
      !context->supports_cuda_memory()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "UcxKvPuller: device pools need a CUDA-aware UCX; this one reports memory types ",
        context->memory_type_names(), " (-DTANDEM_UCX_ROOT, docs/gpu.md)"));
  }
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<UcxWorker> worker,
                          UcxWorker::Create(std::shared_ptr<UcxContext>(std::move(context))));
  return std::unique_ptr<UcxKvPuller>(new UcxKvPuller(options, std::move(worker)));
}

UcxKvPuller::~UcxKvPuller() = default;

absl::StatusOr<std::unique_ptr<KvPoolMemory>> UcxKvPuller::AllocatePool(int64_t bytes) {
  if (options_.device_pools) {
    TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<KvPoolMemory> device,
                            options_.device_pools(options_.device, bytes));
    TANDEM_ASSIGN_OR_RETURN(
        std::unique_ptr<UcxPool> pool,
        UcxPool::Register(worker_->context(), std::move(device), options_.device_pool_memory));
    return std::unique_ptr<KvPoolMemory>(std::move(pool));
  }
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
  const absl::Status first = UcxPullSession(this, source, copies, local_pool, options).Run(&stale);
  if (!stale) return first;
  // A cached endpoint had failed before we used it: the others to this source likely did too
  // (one outage). Reconnect to every rank and pull once more; only this attempt's blame counts.
  Forget(source.engine_id, source.epoch);
  if (options.failed_source_ranks != nullptr) options.failed_source_ranks->resize(blamed_before);
  const absl::Status again = UcxPullSession(this, source, copies, local_pool, options).Run(&stale);
  if (again.ok()) return again;
  return absl::Status(
      again.code(),
      absl::StrCat(again.message(), " (retried on fresh endpoints after: ", first.message(), ")"));
}

}  // namespace tandem
