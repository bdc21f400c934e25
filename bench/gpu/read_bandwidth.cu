#include <cuda_runtime.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "bench/gpu/read_bandwidth.h"
#include "common/cuda/cuda_device.h"
#include "common/cuda/cuda_status.h"
#include "common/status_macros.h"

namespace tandem::bench {
namespace {

__global__ void ReadKernel(const int4* p, int64_t n, unsigned long long* sink) {
  int acc = 0;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int4 v = __ldcs(p + i);  // streaming: do not keep in L2
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x7fffffff) atomicAdd(sink, 1ull);  // practically never; keeps the loads alive
}

}  // namespace

// Owns what one measurement allocates.
struct Resources {
  void* buf = nullptr;
  void* sink = nullptr;
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  ~Resources() {
    if (start != nullptr) (void)cudaEventDestroy(start);
    if (stop != nullptr) (void)cudaEventDestroy(stop);
    (void)cudaFree(sink);
    (void)cudaFree(buf);
  }
};

absl::StatusOr<double> MeasureReadBandwidth(int32_t device, int64_t bytes, int32_t repeats) {
  if (bytes < (int64_t{1} << 20) || repeats < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("read bandwidth: bytes ", bytes, " (>= 1 MiB), repeats ", repeats));
  }
  TANDEM_RETURN_IF_CUDA_ERROR(cudaSetDevice(device));
  int sms = 0;
  TANDEM_RETURN_IF_CUDA_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  Resources r;
  TANDEM_RETURN_IF_CUDA_ERROR(cudaMalloc(&r.buf, bytes));
  TANDEM_RETURN_IF_CUDA_ERROR(cudaMalloc(&r.sink, sizeof(unsigned long long)));
  TANDEM_RETURN_IF_CUDA_ERROR(cudaMemset(r.buf, 1, bytes));
  TANDEM_RETURN_IF_CUDA_ERROR(cudaEventCreate(&r.start));
  TANDEM_RETURN_IF_CUDA_ERROR(cudaEventCreate(&r.stop));
  const int64_t n = bytes / 16;
  double best = 0;
  for (int32_t i = -1; i < repeats; ++i) {  // i = -1: warm-up
    TANDEM_RETURN_IF_CUDA_ERROR(cudaEventRecord(r.start));
    ReadKernel<<<static_cast<unsigned>(sms * 8), 512>>>(static_cast<const int4*>(r.buf), n,
                                                        static_cast<unsigned long long*>(r.sink));
    TANDEM_RETURN_IF_CUDA_ERROR(cudaGetLastError());
    TANDEM_RETURN_IF_CUDA_ERROR(cudaEventRecord(r.stop));
    TANDEM_RETURN_IF_ERROR(gpu::PollUntilDone([&] { return cudaEventQuery(r.stop); },
                                              absl::Seconds(60), "read bandwidth kernel"));
    float ms = 0;
    TANDEM_RETURN_IF_CUDA_ERROR(cudaEventElapsedTime(&ms, r.start, r.stop));
    if (i >= 0 && ms > 0) best = std::max(best, n * 16.0 / (ms * 1e-3));
  }
  return best;
}

}  // namespace tandem::bench
