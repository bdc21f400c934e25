#include "kv_transfer/ucx/transfer_source.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kv_transfer/ucx/progress_thread.h"
#include "kv_transfer/ucx/ucx_pool.h"

namespace tandem {

// Members are destroyed bottom-up: the progress thread stops before the pool is unmapped and
// the worker destroyed; the context (shared by worker and pool) goes last.
struct UcxTransferSource::Rank {
  std::shared_ptr<UcxContext> context;
  std::unique_ptr<UcxWorker> worker;
  std::unique_ptr<UcxPool> pool;
  std::unique_ptr<WorkerProgressThread> progress;
};

UcxTransferSource::UcxTransferSource() = default;
UcxTransferSource::~UcxTransferSource() = default;

absl::StatusOr<std::unique_ptr<UcxTransferSource>> UcxTransferSource::Create(
    const UcxTransferSourceOptions& options) {
  TANDEM_RETURN_IF_ERROR(ValidateKvSourceOptions(options));

  std::unique_ptr<UcxTransferSource> self(new UcxTransferSource());
  self->metadata_.engine_id = options.engine_id;
  self->metadata_.epoch = options.epoch;
  self->metadata_.compat_hash = options.compat_hash;
  self->metadata_.layout = options.layout;

  const int32_t world = options.layout.world();
  for (int32_t r = 0; r < world; ++r) {
    auto rank = std::make_unique<Rank>();
    TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<UcxContext> context, UcxContext::Create(options.ucx));
    rank->context = std::move(context);
    TANDEM_ASSIGN_OR_RETURN(rank->worker, UcxWorker::Create(rank->context));
    if (options.device_pools) {
      TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<KvPoolMemory> device,
                              options.device_pools(r, options.pool_bytes_per_rank));
      TANDEM_ASSIGN_OR_RETURN(
          rank->pool, UcxPool::Register(rank->context, std::move(device), KvMemoryType::kCuda));
    } else {
      TANDEM_ASSIGN_OR_RETURN(rank->pool,
                              UcxPool::Create(rank->context, options.pool_bytes_per_rank));
    }

    RankTransferInfo info;
    TANDEM_ASSIGN_OR_RETURN(info.worker_address, rank->worker->PackedAddress());
    info.pool_base = reinterpret_cast<uint64_t>(rank->pool->base());
    info.pool_bytes = rank->pool->bytes();
    info.rkey = rank->pool->packed_rkey();
    info.memory_type = rank->pool->memory_type();
    self->metadata_.ranks.push_back(std::move(info));

    // Last: from here on only the progress thread touches the worker.
    TANDEM_ASSIGN_OR_RETURN(rank->progress, WorkerProgressThread::Start(rank->worker.get()));
    self->ranks_.push_back(std::move(rank));
  }
  return self;
}

KvPoolMemory& UcxTransferSource::pool(int32_t rank) const { return *ranks_[rank]->pool; }

}  // namespace tandem
