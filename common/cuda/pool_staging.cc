#include "common/cuda/pool_staging.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>

#include "absl/strings/str_cat.h"
#include "common/cuda/cuda_buffer.h"
#include "common/cuda/cuda_device.h"
#include "common/cuda/cuda_status.h"
#include "common/cuda/cuda_stream.h"
#include "common/status_macros.h"

namespace tandem::gpu {

struct PoolStaging::Impl {
  int32_t device = 0;
  char* pool = nullptr;
  int64_t bytes = 0;
  PoolStagingOptions options;
  std::unique_ptr<PinnedBuffer> mirror;
  std::array<std::shared_ptr<CudaStream>, 2> streams;
  std::array<std::unique_ptr<CudaEvent>, 2> done;
};

PoolStaging::PoolStaging(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PoolStaging::~PoolStaging() = default;

absl::StatusOr<std::unique_ptr<PoolStaging>> PoolStaging::Create(
    int32_t device, void* device_pool, int64_t bytes, const PoolStagingOptions& options) {
  if (bytes < 0 || (bytes > 0 && device_pool == nullptr) || options.chunk_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("pool staging: pool of ", bytes, " bytes at ",
                     absl::Hex(reinterpret_cast<uintptr_t>(device_pool)), " with chunks of ",
                     options.chunk_bytes, " bytes"));
  }
  TANDEM_RETURN_IF_ERROR(CheckCudaDevice(device));
  auto impl = std::make_unique<Impl>();
  impl->device = device;
  impl->pool = static_cast<char*>(device_pool);
  impl->bytes = bytes;
  impl->options = options;
  TANDEM_ASSIGN_OR_RETURN(impl->mirror, PinnedBuffer::Create(bytes));
  for (int i = 0; i < 2; ++i) {
    TANDEM_ASSIGN_OR_RETURN(impl->streams[i], CudaStream::Create(device));
    TANDEM_ASSIGN_OR_RETURN(impl->done[i], CudaEvent::Create(device));
  }
  return std::unique_ptr<PoolStaging>(new PoolStaging(std::move(impl)));
}

void* PoolStaging::host() const { return impl_->mirror->data(); }
int64_t PoolStaging::bytes() const { return impl_->bytes; }

absl::Status PoolStaging::ToHost(absl::Span<const ByteRange> ranges) {
  return Copy(ranges, /*to_host=*/true);
}

absl::Status PoolStaging::ToDevice(absl::Span<const ByteRange> ranges) {
  return Copy(ranges, /*to_host=*/false);
}

absl::Status PoolStaging::Copy(absl::Span<const ByteRange> ranges, bool to_host) {
  Impl& m = *impl_;
  for (size_t i = 0; i < ranges.size(); ++i) {
    const ByteRange& r = ranges[i];
    if (r.offset < 0 || r.length < 0 || r.offset > m.bytes || r.length > m.bytes - r.offset) {
      return absl::InvalidArgumentError(absl::StrCat("pool staging: range ", i, " [", r.offset,
                                                     ", +", r.length, ") leaves the pool of ",
                                                     m.bytes, " bytes"));
    }
  }
  const ScopedDevice scope(m.device);
  TANDEM_RETURN_IF_ERROR(scope.status());
  char* host = static_cast<char*>(m.mirror->data());
  const cudaMemcpyKind kind = to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice;
  int next = 0;  // stream of the next chunk
  for (const ByteRange& r : ranges) {
    for (int64_t at = r.offset; at < r.offset + r.length; at += m.options.chunk_bytes) {
      const int64_t n = std::min(m.options.chunk_bytes, r.offset + r.length - at);
      void* dst = to_host ? static_cast<void*>(host + at) : static_cast<void*>(m.pool + at);
      const void* src =
          to_host ? static_cast<const void*>(m.pool + at) : static_cast<const void*>(host + at);
      TANDEM_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(dst, src, n, kind, m.streams[next]->get()));
      next ^= 1;
    }
  }
  for (int i = 0; i < 2; ++i) {
    TANDEM_RETURN_IF_CUDA_ERROR(cudaEventRecord(m.done[i]->get(), m.streams[i]->get()));
  }
  // One deadline for the whole call, shared by both streams.
  const absl::Time deadline = absl::Now() + m.options.timeout;
  for (int i = 0; i < 2; ++i) {
    TANDEM_RETURN_IF_ERROR(
        PollUntilDone([&] { return cudaEventQuery(m.done[i]->get()); }, deadline - absl::Now(),
                      absl::StrCat("pool staging: ", to_host ? "device->host" : "host->device",
                                   " copy of ", ranges.size(), " range(s)")));
  }
  return absl::OkStatus();
}

}  // namespace tandem::gpu
