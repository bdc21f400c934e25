// The registry offers "cuda" in CUDA builds and reports precisely why it cannot be used on a
// machine without a GPU. These tests run with or without a GPU (they check whichever is true).
#include <algorithm>

#include "engine/backend_registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/attention/cuda/cuda_test_util.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;

TEST(CudaRegistryTest, CudaIsCompiledIn) {
  const std::vector<std::string> kinds = CompiledBackends();
  EXPECT_NE(std::find(kinds.begin(), kinds.end(), "cpu"), kinds.end());
  EXPECT_NE(std::find(kinds.begin(), kinds.end(), "cuda"), kinds.end());
}

TEST(CudaRegistryTest, CreateBackendIsUsableOrSaysWhyNot) {
  absl::StatusOr<std::unique_ptr<ComputeBackend>> b = CreateBackend("cuda", 0);
  if (testing::CudaSkipReason().empty()) {
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ((*b)->device_key(), "cuda:0");
  } else {
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.status().code(), absl::StatusCode::kUnavailable) << b.status();
    EXPECT_THAT(std::string(b.status().message()), HasSubstr("no CUDA device: cudaGetDeviceCount"));
  }
}

TEST(CudaRegistryTest, MissingDeviceIsUnavailable) {
  const absl::StatusOr<std::unique_ptr<ComputeBackend>> b = CreateBackend("cuda", 4096);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kUnavailable) << b.status();
  const std::string want =
      testing::CudaSkipReason().empty() ? "CUDA device 4096 is not present" : "no CUDA device";
  EXPECT_THAT(std::string(b.status().message()), HasSubstr(want));
}

TEST(CudaRegistryTest, CommunicatorGroupsAreChecked) {
  auto empty = CreateCommunicators("cuda", {}, absl::Seconds(5));
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument) << empty.status();
  auto twice = CreateCommunicators("cuda", {0, 0}, absl::Seconds(5));
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kInvalidArgument) << twice.status();
  EXPECT_THAT(std::string(twice.status().message()), HasSubstr("lists a device twice"));
  auto missing = CreateCommunicators("cuda", {4096}, absl::Seconds(5));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kUnavailable) << missing.status();
  auto unknown = CreateCommunicators("tpu", {0}, absl::Seconds(5));
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(unknown.status().message()),
              HasSubstr("unknown backend 'tpu'; compiled in: cpu, cuda"));
}

}  // namespace
}  // namespace tandem
