#include "kv_transfer/ucx/transfer_source.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kv_transfer/ucx/progress_thread.h"
#include "kv_transfer/ucx/ucx_pool.h"

namespace tandem {

// Members are destroyed bottom-up: the progress thread stops before the pool is unmapped and
// the worker destroyed; the context (shared by worker and pool) goes last.
struct TransferSource::Rank {
  std::shared_ptr<UcxContext> context;
  std::unique_ptr<UcxWorker> worker;
  std::unique_ptr<UcxPool> pool;
  std::unique_ptr<WorkerProgressThread> progress;
};

TransferSource::TransferSource() = default;
TransferSource::~TransferSource() = default;

absl::StatusOr<std::unique_ptr<TransferSource>> TransferSource::Create(
    const TransferSourceOptions& options) {
  if (options.engine_id.empty()) {
    return absl::InvalidArgumentError("TransferSource: engine_id must not be empty");
  }
  TANDEM_RETURN_IF_ERROR(
      ValidateParallelConfig(options.layout.parallel, options.layout.dims, InstanceRole::kPrefill));
  if (options.pool_bytes_per_rank <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TransferSource: pool_bytes_per_rank must be > 0, got ", options.pool_bytes_per_rank));
  }

  std::unique_ptr<TransferSource> self(new TransferSource());
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
    TANDEM_ASSIGN_OR_RETURN(rank->pool,
                            UcxPool::Create(rank->context, options.pool_bytes_per_rank));

    RankTransferInfo info;
    TANDEM_ASSIGN_OR_RETURN(info.worker_address, rank->worker->PackedAddress());
    info.pool_base = reinterpret_cast<uint64_t>(rank->pool->base());
    info.pool_bytes = rank->pool->bytes();
    info.rkey = rank->pool->packed_rkey();
    self->metadata_.ranks.push_back(std::move(info));

    // Last: from here on only the progress thread touches the worker.
    TANDEM_ASSIGN_OR_RETURN(rank->progress, WorkerProgressThread::Start(rank->worker.get()));
    self->ranks_.push_back(std::move(rank));
  }
  return self;
}

KvPoolMemory& TransferSource::pool(int32_t rank) const { return *ranks_[rank]->pool; }

namespace {

class BorrowedPool final : public KvPoolMemory {
 public:
  BorrowedPool(void* base, int64_t bytes) : base_(base), bytes_(bytes) {}
  void* base() const override { return base_; }
  int64_t bytes() const override { return bytes_; }

 private:
  void* base_;
  int64_t bytes_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<KvPoolMemory>> TransferSource::BorrowPool(int32_t rank,
                                                                         int64_t bytes) const {
  if (rank < 0 || rank >= world()) {
    return absl::InvalidArgumentError(
        absl::StrCat("TransferSource::BorrowPool: rank ", rank, " outside [0, ", world(), ")"));
  }
  const KvPoolMemory& p = pool(rank);
  if (bytes < 0 || bytes > p.bytes()) {
    return absl::InvalidArgumentError(absl::StrCat("TransferSource::BorrowPool: rank ", rank,
                                                   " asked for ", bytes, " bytes, pool has ",
                                                   p.bytes()));
  }
  return std::unique_ptr<KvPoolMemory>(new BorrowedPool(p.base(), bytes));
}

}  // namespace tandem
