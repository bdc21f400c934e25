#include "kv_transfer/kv_pool_path.h"

#include "absl/strings/str_cat.h"

namespace tandem {

absl::StatusOr<KvPoolPathChoice> ChooseKvPoolPath(const KvPoolPathInput& in) {
  if (in.gpu_direct && in.staging_always) {
    return absl::InvalidArgumentError(
        "--kv_gpu_direct and --kv_staging=always contradict each other: GPU-direct KV registers "
        "the device pools themselves, --kv_staging=always asks for host mirrors");
  }
  const KvPoolPath host_default = in.backend_memory_is_host && !in.staging_always
                                      ? KvPoolPath::kTransportPool
                                      : KvPoolPath::kHostMirror;
  if (!in.gpu_direct) return KvPoolPathChoice{host_default, ""};
  const std::string types = in.ucx_memory_types.empty() ? "none reported" : in.ucx_memory_types;
  if (!in.ucx_cuda_memory) {
    return KvPoolPathChoice{
        host_default,
        absl::StrCat("--kv_gpu_direct: this UCX has no CUDA transport (memory types: ", types,
                     "); falling back to ",
                     host_default == KvPoolPath::kHostMirror
                         ? "host mirrors of the device KV pools"
                         : "host KV pools (the backend's memory is host memory)",
                     " — build with -DTANDEM_UCX_ROOT=$(deploy/fetch-ucx-cuda.sh) for GPU-direct")};
  }
  if (in.backend_memory_is_host) {
    return KvPoolPathChoice{
        host_default, "--kv_gpu_direct has no effect: the backend's KV pools are host memory"};
  }
  return KvPoolPathChoice{
      KvPoolPath::kDevicePool,
      absl::StrCat("GPU-direct KV: device pools registered with UCX (memory types: ", types,
                   "); pulls go device to device")};
}

PullMemoryAccess PullAccessFor(KvMemoryType local, KvMemoryType source) {
  const bool host = local == KvMemoryType::kHost && source == KvMemoryType::kHost;
  return PullMemoryAccess{host, host};
}

const char* KvPoolPathName(KvPoolPath path) {
  switch (path) {
    case KvPoolPath::kTransportPool:
      return "transport_pool";
    case KvPoolPath::kHostMirror:
      return "host_mirror";
    case KvPoolPath::kDevicePool:
      return "device_pool";
  }
  return "?";
}

}  // namespace tandem
