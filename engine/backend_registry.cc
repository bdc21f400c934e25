#include "engine/backend_registry.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/cpu_communicator.h"
#include "model/cpu/cpu_backend.h"

// TANDEM_HAVE_CUDA is a PRIVATE definition of the engine target: this file is the only one that
// knows what was compiled in (STYLE.md "Interfaces").
#if defined(TANDEM_HAVE_CUDA)
#include "common/cuda/cuda_buffer.h"
#include "engine/nccl_communicator.h"
#include "model/cuda/cuda_backend.h"
#endif

namespace tandem {

std::vector<std::string> CompiledBackends() {
#if defined(TANDEM_HAVE_CUDA)
  return {"cpu", "cuda"};
#else
  return {"cpu"};
#endif
}

bool BackendMemoryIsHost(absl::string_view kind) { return kind == "cpu"; }

absl::StatusOr<std::unique_ptr<ComputeBackend>> CreateBackend(absl::string_view kind,
                                                              int32_t device_index) {
  if (kind == "cpu") return CreateCpuBackend();
#if defined(TANDEM_HAVE_CUDA)
  if (kind == "cuda") return CreateCudaBackend(device_index);
#else
  (void)device_index;
#endif
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown backend '", kind, "'; compiled in: ", absl::StrJoin(CompiledBackends(), ", ")));
}

#if defined(TANDEM_HAVE_CUDA)
namespace {
class CudaKvPoolMemory final : public KvPoolMemory {
 public:
  explicit CudaKvPoolMemory(std::unique_ptr<gpu::CudaDeviceBuffer> buffer)
      : buffer_(std::move(buffer)) {}
  void* base() const override { return buffer_->data(); }
  int64_t bytes() const override { return buffer_->bytes(); }

 private:
  std::unique_ptr<gpu::CudaDeviceBuffer> buffer_;
};
}  // namespace
#endif

absl::StatusOr<std::unique_ptr<KvPoolMemory>> AllocateDeviceKvPool(absl::string_view kind,
                                                                   int32_t device_index,
                                                                   int64_t bytes) {
#if defined(TANDEM_HAVE_CUDA)
  if (kind == "cuda") {
    absl::StatusOr<std::unique_ptr<gpu::CudaDeviceBuffer>> buffer =
        gpu::CudaDeviceBuffer::Create(device_index, bytes);
    if (!buffer.ok()) return buffer.status();
    return std::unique_ptr<KvPoolMemory>(std::make_unique<CudaKvPoolMemory>(*std::move(buffer)));
  }
#else
  (void)device_index;
  (void)bytes;
#endif
  return absl::InvalidArgumentError(absl::StrCat(
      "backend '", kind, "' has no device memory for GPU-direct KV pools; compiled in: ",
      absl::StrJoin(CompiledBackends(), ", ")));
}

absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> CreateCommunicators(
    absl::string_view kind, const std::vector<int32_t>& device_indices, absl::Duration timeout) {
  if (kind == "cpu") {
    return CreateCpuCommunicators(static_cast<int32_t>(device_indices.size()), timeout);
  }
#if defined(TANDEM_HAVE_CUDA)
  if (kind == "cuda") return CreateNcclCommunicators(device_indices, timeout);
#endif
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown backend '", kind, "'; compiled in: ", absl::StrJoin(CompiledBackends(), ", ")));
}

}  // namespace tandem
