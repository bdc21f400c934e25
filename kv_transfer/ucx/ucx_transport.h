// The UCX transport behind the transfer interfaces (kv_transfer/kv_source.h, kv_puller.h): the
// factories tandem-prefill and tandem-decode hand their nodes. Every source and puller gets its
// own UCX context(s) configured by `ucx`.
#pragma once

#include "kv_transfer/kv_puller.h"
#include "kv_transfer/kv_source.h"
#include "kv_transfer/ucx/ucx_worker.h"

namespace tandem {

KvSourceFactory UcxSourceFactory(UcxOptions ucx);  // UcxTransferSource
KvPullerFactory UcxPullerFactory(UcxOptions ucx);  // UcxKvPuller

}  // namespace tandem
