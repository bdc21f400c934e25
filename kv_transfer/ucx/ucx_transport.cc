#include "kv_transfer/ucx/ucx_transport.h"

#include <utility>

#include "common/status_macros.h"
#include "kv_transfer/ucx/kv_puller.h"
#include "kv_transfer/ucx/transfer_source.h"

namespace tandem {

KvSourceFactory UcxSourceFactory(UcxOptions ucx, KvPoolAllocator device_pools) {
  return [ucx = std::move(ucx), device_pools = std::move(device_pools)](
             const KvSourceOptions& options) -> absl::StatusOr<std::unique_ptr<KvSource>> {
    UcxTransferSourceOptions o;
    static_cast<KvSourceOptions&>(o) = options;
    o.ucx = ucx;
    o.device_pools = device_pools;
    TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<UcxTransferSource> source,
                            UcxTransferSource::Create(o));
    return std::unique_ptr<KvSource>(std::move(source));
  };
}

KvPullerFactory UcxPullerFactory(UcxOptions ucx, KvPoolAllocator device_pools) {
  return [ucx = std::move(ucx), device_pools = std::move(device_pools)](
             int32_t rank) -> absl::StatusOr<std::unique_ptr<KvPuller>> {
    UcxKvPullerOptions o{ucx};
    o.device_pools = device_pools;
    o.device = rank;
    TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<UcxKvPuller> puller, UcxKvPuller::Create(o));
    return std::unique_ptr<KvPuller>(std::move(puller));
  };
}

}  // namespace tandem
