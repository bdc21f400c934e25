#include "tests/attention/cuda/cuda_test_util.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "common/cuda/cuda_device.h"

namespace tandem::testing {

double Fp32MergeBound(int32_t n, float merged_lse, double magnitude) {
  return 2.0 * FLT_EPSILON * (n + 6.0 + std::abs(double{merged_lse})) * magnitude;
}

const std::string& CudaSkipReason() {
  static const std::string* reason = [] {
    const absl::Status s = gpu::CheckCudaDevice(0);
    return new std::string(s.ok() ? "" : std::string(s.message()));
  }();
  return *reason;
}

int CudaDeviceCount() {
  if (!CudaSkipReason().empty()) return 0;
  int n = 0;
  CheckCuda(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
  return n;
}

void CheckCuda(int error, const char* what) {
  if (error == cudaSuccess) return;
  const auto e = static_cast<cudaError_t>(error);
  std::fprintf(stderr, "FATAL: %s: %s (%s)\n", what, cudaGetErrorName(e), cudaGetErrorString(e));
  std::abort();
}

DeviceBytes::DeviceBytes(size_t bytes) : bytes_(bytes) {
  CheckCuda(cudaMalloc(&data_, std::max<size_t>(bytes, 1)), "cudaMalloc");
}

DeviceBytes::~DeviceBytes() { cudaFree(data_); }

void DeviceBytes::Fill(uint8_t byte) { CheckCuda(cudaMemset(data_, byte, bytes_), "cudaMemset"); }

void DeviceBytes::Upload(const void* host, size_t bytes) {
  if (bytes > bytes_) {
    std::fprintf(stderr, "FATAL: upload of %zu bytes into %zu\n", bytes, bytes_);
    std::abort();
  }
  CheckCuda(cudaMemcpy(data_, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
}

void DeviceBytes::Download(void* host, size_t bytes) const {
  CheckCuda(cudaMemcpy(host, data_, std::min(bytes, bytes_), cudaMemcpyDeviceToHost),
            "cudaMemcpy D2H");
}

void SyncDevice() { CheckCuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

}  // namespace tandem::testing
