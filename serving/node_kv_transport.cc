#include "serving/node_kv_transport.h"

#include <cstdio>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/backend_registry.h"

namespace tandem {

absl::StatusOr<NodeKvTransport> ResolveNodeKvTransport(const char* program, UcxOptions ucx,
                                                       bool gpu_direct, InstanceOptions* instance) {
  KvPoolPathInput in;
  in.backend_memory_is_host = BackendMemoryIsHost(instance->backend);
  in.staging_always = instance->kv_staging == KvStaging::kAlways;
  in.gpu_direct = gpu_direct;
  if (gpu_direct) {
    TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<UcxContext> probe, UcxContext::Create(ucx));
    in.ucx_cuda_memory = probe->supports_cuda_memory();
    in.ucx_memory_types = probe->memory_type_names();
  }
  TANDEM_ASSIGN_OR_RETURN(KvPoolPathChoice choice, ChooseKvPoolPath(in));
  NodeKvTransport out;
  out.ucx = std::move(ucx);
  if (choice.path == KvPoolPath::kDevicePool) {
    instance->kv_staging = KvStaging::kDevice;
    out.device_pools = [backend = instance->backend](int32_t device, int64_t bytes) {
      return AllocateDeviceKvPool(backend, device, bytes);
    };
  }
  if (!choice.note.empty()) {
    const std::string line = absl::StrCat(program, ": ", choice.note, "\n");
    std::fwrite(line.data(), 1, line.size(), stderr);
  }
  out.choice = std::move(choice);
  return out;
}

}  // namespace tandem
