#include "kv_transfer/ucx/ucx_transport.h"

#include <utility>

#include "common/status_macros.h"
#include "kv_transfer/ucx/kv_puller.h"
#include "kv_transfer/ucx/transfer_source.h"

namespace tandem {

KvSourceFactory UcxSourceFactory(UcxOptions ucx) {
  return [ucx = std::move(ucx)](
             const KvSourceOptions& options) -> absl::StatusOr<std::unique_ptr<KvSource>> {
    UcxTransferSourceOptions o;
    static_cast<KvSourceOptions&>(o) = options;
    o.ucx = ucx;
    TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<UcxTransferSource> source,
                            UcxTransferSource::Create(o));
    return std::unique_ptr<KvSource>(std::move(source));
  };
}

KvPullerFactory UcxPullerFactory(UcxOptions ucx) {
  return [ucx = std::move(ucx)](int32_t) -> absl::StatusOr<std::unique_ptr<KvPuller>> {
    TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<UcxKvPuller> puller,
                            UcxKvPuller::Create(UcxKvPullerOptions{ucx}));
    return std::unique_ptr<KvPuller>(std::move(puller));
  };
}

}  // namespace tandem
