// Helpers for tests of CUDA code: the visible skip when no GPU is usable, and a minimal RAII
// device array with synchronous copies (tests launch on the legacy default stream, so plain
// cudaMemcpy orders after every launch).
//
// Every CUDA test fixture derives from CudaTest; without a usable device each test is skipped
// with "no CUDA device: <reason from cudaGetDeviceCount>" and the binary exits 0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tandem::testing {

// "" when CUDA device 0 is usable; otherwise why not (computed once).
const std::string& CudaSkipReason();
// Usable CUDA devices (0 when none).
int CudaDeviceCount();

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CudaSkipReason().empty()) GTEST_SKIP() << CudaSkipReason();
  }
};

// Aborts the test binary with the CUDA error when `error` is not cudaSuccess (a broken device
// makes every later check meaningless). `error` is a cudaError_t passed as int to keep CUDA
// headers out of this header.
void CheckCuda(int error, const char* what);

// n elements of T on the current device.
class DeviceBytes {
 public:
  explicit DeviceBytes(size_t bytes);
  ~DeviceBytes();
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  void Fill(uint8_t byte);
  void Upload(const void* host, size_t bytes);
  void Download(void* host, size_t bytes) const;

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n), mem_(n * sizeof(T)) {}
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { Upload(host); }
  T* get() const { return static_cast<T*>(mem_.data()); }
  size_t size() const { return n_; }
  void Fill(uint8_t byte) { mem_.Fill(byte); }
  void Upload(const std::vector<T>& host) { mem_.Upload(host.data(), host.size() * sizeof(T)); }
  std::vector<T> Download() const {
    std::vector<T> host(n_);
    mem_.Download(host.data(), n_ * sizeof(T));
    return host;
  }

 private:
  size_t n_;
  DeviceBytes mem_;
};

// Bound on |gpu − cpu| for a value of an n-way LSE merge or correction (lse_merge.h) whose merged
// LSE is `merged_lse`, when both sides evaluate the same float expressions in the same order:
//   2 · ε · (n + 6 + |merged_lse|) · magnitude,   ε = FLT_EPSILON = 2^−23.
// Why: CUDA's expf (≤ 2 ulp) and logf (≤ 1 ulp) differ from glibc's (< 1 ulp), so the sum
// s = Σ exp(L_i − m) differs by ≤ 2ε relative, log s by ≤ 3ε absolute, and L = m + log s by that
// plus one rounding of |L| (ε·|L|): |ΔL| ≤ ε(4 + |L|). A weight exp(L_i − L) then differs by
// ≤ ε(6 + |L|) relative, and a weighted sum Σ w_i·o_i by that times Σ w_i·|o_i| ≤ max_i |o_i|
// (the weights sum to 1). The factor 2 and the n (one rounding per term) are margin. So
// `magnitude` is 1 for an LSE, max_i |o_i| over non-empty partials for a merged output, and |x|
// for a corrected (rescaled) output x. A fixed 1e-6 bound is below this for |L| ≳ 2 and fails
// on real hardware (issue 14: 1.07e-6 and 1.3e-6 on an H200); a wrong weight, item or partial
// gives errors of order magnitude.
double Fp32MergeBound(int32_t n, float merged_lse, double magnitude);

// Waits for all device work (the tests' only synchronisation with the GPU) and fails the binary
// on an asynchronous kernel fault.
void SyncDevice();

}  // namespace tandem::testing
