#include "kv_transfer/kv_source.h"

#include "absl/strings/str_cat.h"
#include "attention/parallel_layout.h"

namespace tandem {
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

absl::Status ValidateKvSourceOptions(const KvSourceOptions& options) {
  if (options.engine_id.empty()) {
    return absl::InvalidArgumentError("KV source: engine_id must not be empty");
  }
  const absl::Status layout =
      ValidateParallelConfig(options.layout.parallel, options.layout.dims, InstanceRole::kPrefill);
  if (!layout.ok()) return layout;
  if (options.pool_bytes_per_rank <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV source: pool_bytes_per_rank must be > 0, got ", options.pool_bytes_per_rank));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<KvPoolMemory>> KvSource::BorrowPool(int32_t rank,
                                                                   int64_t bytes) const {
  if (rank < 0 || rank >= world()) {
    return absl::InvalidArgumentError(
        absl::StrCat("KvSource::BorrowPool: rank ", rank, " outside [0, ", world(), ")"));
  }
  const KvPoolMemory& p = pool(rank);
  if (bytes < 0 || bytes > p.bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KvSource::BorrowPool: rank ", rank, " asked for ", bytes, " bytes, pool has ", p.bytes()));
  }
  return std::unique_ptr<KvPoolMemory>(new BorrowedPool(p.base(), bytes));
}

}  // namespace tandem
