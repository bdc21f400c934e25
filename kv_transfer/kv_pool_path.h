// Where a node's KV pools live for the transfer, decided once at start-up from what was asked
// (--kv_gpu_direct, --kv_staging) and what the backend and the UCX library offer
// (docs/gpu.md#gpu-direct-kv). Pure: no UCX or CUDA here; the caller queries UCX's memory types
// (UcxContext::supports_cuda_memory) and hands the answer in.
//
//   kTransportPool  the pool is host memory the transport allocated (CPU backend)
//   kHostMirror     the pool is backend (device) memory; the transport reads/writes a host mirror
//                   with the same layout (engine/instance.h, KvStaging)
//   kDevicePool     the pool is device memory registered with a CUDA-aware UCX; pulls go
//                   device→device (cuda_ipc on one host), no mirror
//
// GPU-direct is opt-in: without it the choice is exactly what --kv_staging alone gave before.
// With it and a UCX that reports no CUDA memory type, the host mirror is the fallback and the
// note says so (the node logs it). Thread-safety: free functions.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "kv_transfer/transfer_types.h"

namespace tandem {

enum class KvPoolPath { kTransportPool, kHostMirror, kDevicePool };

struct KvPoolPathInput {
  bool backend_memory_is_host = true;  // BackendMemoryIsHost(--backend)
  bool staging_always = false;         // --kv_staging=always
  bool gpu_direct = false;             // --kv_gpu_direct
  bool ucx_cuda_memory = false;        // the UCX context reports UCS_MEMORY_TYPE_CUDA
  std::string ucx_memory_types;        // e.g. "host" or "host,cuda,cuda-managed", for the note
};

struct KvPoolPathChoice {
  KvPoolPath path = KvPoolPath::kTransportPool;
  std::string note;  // one line for the log; empty when nothing deviates from the defaults
};

// INVALID_ARGUMENT when gpu_direct and staging_always are both set (contradictory).
[[nodiscard]] absl::StatusOr<KvPoolPathChoice> ChooseKvPoolPath(const KvPoolPathInput& input);

const char* KvPoolPathName(KvPoolPath path);  // "transport_pool", "host_mirror", "device_pool"

// How a puller may move bytes from one source rank's pool into its local pool. Reading a pool
// UCX mapped into this process with memcpy, and gathering small copies through host staging
// (scattered with memcpy), both load/store the pools from the CPU: only host memory on both
// sides allows that. Device memory moves only through UCX gets (cuda_ipc / cuda_copy).
struct PullMemoryAccess {
  bool memcpy_mapped = false;  // a mapped source pool may be read with memcpy
  bool gather = false;         // small copies may be gathered through host staging
};
[[nodiscard]] PullMemoryAccess PullAccessFor(KvMemoryType local, KvMemoryType source);

}  // namespace tandem
