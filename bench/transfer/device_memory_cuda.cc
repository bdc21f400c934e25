// device_memory.h with the CUDA runtime (builds with the CUDA backend). Every wait is bounded
// (PollUntilDone).
#include <cuda_runtime_api.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "bench/transfer/device_memory.h"
#include "common/cuda/cuda_buffer.h"
#include "common/cuda/cuda_device.h"
#include "common/cuda/cuda_status.h"
#include "common/cuda/cuda_stream.h"
#include "common/status_macros.h"

namespace tandem::bench {
namespace {

constexpr absl::Duration kCopyTimeout = absl::Seconds(60);

class DeviceMemory final : public KvPoolMemory {
 public:
  explicit DeviceMemory(std::unique_ptr<gpu::CudaDeviceBuffer> buffer)
      : buffer_(std::move(buffer)) {}
  void* base() const override { return buffer_->data(); }
  int64_t bytes() const override { return buffer_->bytes(); }

 private:
  std::unique_ptr<gpu::CudaDeviceBuffer> buffer_;
};

absl::Status Copy(void* dst, const void* src, int64_t bytes, cudaMemcpyKind kind) {
  TANDEM_RETURN_IF_CUDA_ERROR(cudaMemcpy(dst, src, static_cast<size_t>(bytes), kind));
  return absl::OkStatus();
}

}  // namespace

absl::Status CudaDeviceAvailable(int32_t device, std::string* name) {
  TANDEM_RETURN_IF_ERROR(gpu::CheckCudaDevice(device));
  cudaDeviceProp prop{};
  TANDEM_RETURN_IF_CUDA_ERROR(cudaGetDeviceProperties(&prop, device));
  *name = prop.name;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<KvPoolMemory>> AllocateDeviceMemory(int32_t device, int64_t bytes) {
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<gpu::CudaDeviceBuffer> buffer,
                          gpu::CudaDeviceBuffer::Create(device, bytes));
  return std::unique_ptr<KvPoolMemory>(std::make_unique<DeviceMemory>(std::move(buffer)));
}

absl::Status CopyToDevice(void* dst, const void* src, int64_t bytes) {
  return Copy(dst, src, bytes, cudaMemcpyHostToDevice);
}

absl::Status CopyToHost(void* dst, const void* src, int64_t bytes) {
  return Copy(dst, src, bytes, cudaMemcpyDeviceToHost);
}

absl::StatusOr<absl::Duration> TimeDeviceCopies(int32_t device, const void* src, void* dst,
                                                absl::Span<const TransferCopy> copies) {
  const gpu::ScopedDevice scope(device);
  TANDEM_RETURN_IF_ERROR(scope.status());
  TANDEM_ASSIGN_OR_RETURN(std::shared_ptr<gpu::CudaStream> stream, gpu::CudaStream::Create(device));
  const auto* from = static_cast<const std::byte*>(src);
  auto* to = static_cast<std::byte*>(dst);
  const absl::Time start = absl::Now();
  for (const TransferCopy& c : copies) {
    TANDEM_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(to + c.dst_offset, from + c.src_offset,
                                                static_cast<size_t>(c.length),
                                                cudaMemcpyDeviceToDevice, stream->get()));
  }
  TANDEM_RETURN_IF_ERROR(gpu::PollUntilDone([&] { return cudaStreamQuery(stream->get()); },
                                            kCopyTimeout, "device-to-device copies"));
  return absl::Now() - start;
}

}  // namespace tandem::bench
