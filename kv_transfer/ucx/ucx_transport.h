// The UCX transport behind the transfer interfaces (kv_transfer/kv_source.h, kv_puller.h): the
// factories tandem-prefill and tandem-decode hand their nodes. Every source and puller gets its
// own UCX context(s) configured by `ucx`.
//
// `device_pools` set (GPU-direct KV, docs/gpu.md#gpu-direct-kv): pools are device memory from
// device_pools(device index = global rank, bytes), registered with UCX as CUDA memory. Unset:
// UCX-allocated host pools, as before.
#pragma once

#include "common/kv_pool_memory.h"
#include "kv_transfer/kv_puller.h"
#include "kv_transfer/kv_source.h"
#include "kv_transfer/ucx/ucx_worker.h"

namespace tandem {

KvSourceFactory UcxSourceFactory(UcxOptions ucx, KvPoolAllocator device_pools = {});
KvPullerFactory UcxPullerFactory(UcxOptions ucx, KvPoolAllocator device_pools = {});

}  // namespace tandem
