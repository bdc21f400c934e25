// ChooseKvPoolPath and PullAccessFor (kv_transfer/kv_pool_path.h): where KV pools live for the
// transfer, over every combination of what was asked and what the backend and UCX offer.
#include "kv_transfer/kv_pool_path.h"

#include "gtest/gtest.h"
#include "tests/kv_transfer/status_matchers.h"

namespace tandem::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

KvPoolPathInput In(bool host_backend, bool always, bool gpu_direct, bool ucx_cuda) {
  KvPoolPathInput in;
  in.backend_memory_is_host = host_backend;
  in.staging_always = always;
  in.gpu_direct = gpu_direct;
  in.ucx_cuda_memory = ucx_cuda;
  in.ucx_memory_types = ucx_cuda ? "host,cuda,cuda-managed" : "host";
  return in;
}

TEST(KvPoolPathTest, WithoutGpuDirectNothingChangesWhateverUcxOffers) {
  for (const bool ucx_cuda : {false, true}) {
    SCOPED_TRACE(ucx_cuda ? "UCX with CUDA" : "UCX without CUDA");
    struct Case {
      bool host_backend, always;
      KvPoolPath path;
    };
    for (const Case& c :
         {Case{true, false, KvPoolPath::kTransportPool}, Case{true, true, KvPoolPath::kHostMirror},
          Case{false, false, KvPoolPath::kHostMirror},
          Case{false, true, KvPoolPath::kHostMirror}}) {
      absl::StatusOr<KvPoolPathChoice> choice =
          ChooseKvPoolPath(In(c.host_backend, c.always, false, ucx_cuda));
      ASSERT_OK(choice);
      EXPECT_EQ(choice->path, c.path) << KvPoolPathName(choice->path);
      EXPECT_THAT(choice->note, IsEmpty());
    }
  }
}

TEST(KvPoolPathTest, GpuDirectOnADeviceBackendWithCudaInUcxRegistersDevicePools) {
  absl::StatusOr<KvPoolPathChoice> choice = ChooseKvPoolPath(In(false, false, true, true));
  ASSERT_OK(choice);
  EXPECT_EQ(choice->path, KvPoolPath::kDevicePool);
  EXPECT_THAT(choice->note, HasSubstr("GPU-direct KV: device pools registered with UCX"));
  EXPECT_THAT(choice->note, HasSubstr("host,cuda,cuda-managed"));
}

TEST(KvPoolPathTest, GpuDirectWithoutCudaInUcxFallsBackToHostMirrorsAndSaysSo) {
  absl::StatusOr<KvPoolPathChoice> choice = ChooseKvPoolPath(In(false, false, true, false));
  ASSERT_OK(choice);
  EXPECT_EQ(choice->path, KvPoolPath::kHostMirror);
  EXPECT_THAT(choice->note, HasSubstr("this UCX has no CUDA transport (memory types: host)"));
  EXPECT_THAT(choice->note, HasSubstr("falling back to host mirrors of the device KV pools"));
  EXPECT_THAT(choice->note, HasSubstr("TANDEM_UCX_ROOT"));

  KvPoolPathInput none = In(false, false, true, false);
  none.ucx_memory_types.clear();
  choice = ChooseKvPoolPath(none);
  ASSERT_OK(choice);
  EXPECT_THAT(choice->note, HasSubstr("memory types: none reported"));
}

TEST(KvPoolPathTest, GpuDirectOnTheCpuBackendKeepsHostPoolsAndSaysWhy) {
  absl::StatusOr<KvPoolPathChoice> choice = ChooseKvPoolPath(In(true, false, true, false));
  ASSERT_OK(choice);
  EXPECT_EQ(choice->path, KvPoolPath::kTransportPool);
  EXPECT_THAT(choice->note, HasSubstr("falling back to host KV pools"));
  choice = ChooseKvPoolPath(In(true, false, true, true));
  ASSERT_OK(choice);
  EXPECT_EQ(choice->path, KvPoolPath::kTransportPool);
  EXPECT_THAT(choice->note, HasSubstr("has no effect"));
}

TEST(KvPoolPathTest, GpuDirectWithStagingAlwaysIsContradictory) {
  for (const bool host_backend : {false, true}) {
    for (const bool ucx_cuda : {false, true}) {
      EXPECT_THAT(ChooseKvPoolPath(In(host_backend, true, true, ucx_cuda)),
                  StatusIs(absl::StatusCode::kInvalidArgument,
                           HasSubstr("--kv_gpu_direct and --kv_staging=always contradict")));
    }
  }
}

TEST(KvPoolPathTest, OnlyHostMemoryOnBothSidesIsTouchedByTheCpu) {
  const PullMemoryAccess host = PullAccessFor(KvMemoryType::kHost, KvMemoryType::kHost);
  EXPECT_TRUE(host.memcpy_mapped);
  EXPECT_TRUE(host.gather);
  for (const auto& [local, source] : {std::pair{KvMemoryType::kCuda, KvMemoryType::kHost},
                                      std::pair{KvMemoryType::kHost, KvMemoryType::kCuda},
                                      std::pair{KvMemoryType::kCuda, KvMemoryType::kCuda}}) {
    const PullMemoryAccess a = PullAccessFor(local, source);
    EXPECT_FALSE(a.memcpy_mapped);
    EXPECT_FALSE(a.gather);
  }
}

}  // namespace
}  // namespace tandem::testing
