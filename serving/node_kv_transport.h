// How a prefill or decode node reaches its KV pools through UCX (docs/gpu.md#gpu-direct-kv):
// the UCX options and, with GPU-direct KV asked for (--kv_gpu_direct) on a device backend whose
// UCX reports CUDA memory, the allocator of device pools that the transport registers in place.
//
// ResolveNodeKvTransport probes UCX once (a context with the node's UCX options, queried for
// its memory types and released), decides with ChooseKvPoolPath (kv_transfer/kv_pool_path.h)
// and, for device pools, sets instance->kv_staging to KvStaging::kDevice so the engine keeps no
// host mirror. When the choice deviates from the defaults (a fallback, GPU-direct on, or a flag
// without effect) it writes one line "<program>: <note>" to stderr. Without gpu_direct UCX is not
// probed and nothing changes: the node runs exactly as before.
// Thread-safety: free functions; call at start-up.
#pragma once

#include "absl/status/statusor.h"
#include "common/kv_pool_memory.h"
#include "engine/instance.h"
#include "kv_transfer/kv_pool_path.h"
#include "kv_transfer/ucx/ucx_worker.h"

namespace tandem {

struct NodeKvTransport {
  UcxOptions ucx;
  KvPoolAllocator device_pools;  // set only for KvPoolPath::kDevicePool
  KvPoolPathChoice choice;
};

// INVALID_ARGUMENT for contradictory flags (ChooseKvPoolPath); UCX errors of the probe.
[[nodiscard]] absl::StatusOr<NodeKvTransport> ResolveNodeKvTransport(const char* program,
                                                                     UcxOptions ucx,
                                                                     bool gpu_direct,
                                                                     InstanceOptions* instance);

}  // namespace tandem
