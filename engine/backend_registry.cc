#include "engine/backend_registry.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/cpu_communicator.h"
#include "model/cpu/cpu_backend.h"

namespace tandem {

std::vector<std::string> CompiledBackends() { return {"cpu"}; }

absl::StatusOr<std::unique_ptr<ComputeBackend>> CreateBackend(absl::string_view kind,
                                                              int32_t /*device_index*/) {
  if (kind == "cpu") return CreateCpuBackend();
  return absl::InvalidArgumentError(absl::StrCat("unknown backend '", kind, "'; compiled in: ",
                                                 absl::StrJoin(CompiledBackends(), ", ")));
}

absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> CreateCommunicators(
    absl::string_view kind, const std::vector<int32_t>& device_indices, absl::Duration timeout) {
  if (kind == "cpu") {
    return CreateCpuCommunicators(static_cast<int32_t>(device_indices.size()), timeout);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown backend '", kind, "'"));
}

}  // namespace tandem
