// Helpers for running the same op on the CPU and the CUDA backend: buffers filled from host
// vectors through the backend's own Upload, read back through Download.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "model/backend.h"

namespace tandem::testing {

template <typename T>
std::unique_ptr<DeviceBuffer> Put(ComputeBackend& b, const std::vector<T>& host) {
  const int64_t bytes = static_cast<int64_t>(host.size() * sizeof(T));
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> buf = b.Allocate(bytes);
  EXPECT_TRUE(buf.ok()) << buf.status();
  if (!buf.ok()) return nullptr;
  const absl::Status s = b.Upload((*buf)->data(), host.data(), bytes);
  EXPECT_TRUE(s.ok()) << s;
  return std::move(buf).value();
}

template <typename T>
std::vector<T> Get(ComputeBackend& b, const DeviceBuffer& buf, size_t n) {
  std::vector<T> host(n);
  const absl::Status s = b.Download(host.data(), buf.data(), static_cast<int64_t>(n * sizeof(T)));
  EXPECT_TRUE(s.ok()) << s;
  return host;
}

inline std::vector<float> RandomFloats(size_t n, uint64_t seed, float scale = 1.f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

}  // namespace tandem::testing
