// PoolStaging copies exactly the requested byte ranges between a device pool and its pinned
// mirror, in both directions, whatever the chunking; bad ranges are rejected before any copy.
#include "common/cuda/pool_staging.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "model/cuda/cuda_backend.h"
#include "tests/attention/cuda/cuda_test_util.h"
#include "tests/model/cuda/backend_test_util.h"

namespace tandem::gpu {
namespace {

using testing::Get;
using testing::Put;

std::vector<uint8_t> RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

class PoolStagingTest : public testing::CudaTest {
 protected:
  void SetUp() override {
    testing::CudaTest::SetUp();
    if (IsSkipped()) return;
    absl::StatusOr<std::unique_ptr<ComputeBackend>> b = CreateCudaBackend(0);
    ASSERT_TRUE(b.ok()) << b.status();
    backend_ = std::move(b).value();
  }
  std::unique_ptr<ComputeBackend> backend_;
};

TEST_F(PoolStagingTest, CopiesExactlyTheRangesBothWays) {
  const int64_t bytes = 3 * 1000 * 1000 + 17;
  const std::vector<ByteRange> ranges = {{0, 1},         {5, 4096},    {1 << 20, 1000003},
                                         {bytes - 9, 9}, {2500000, 0}, {700, 300}};
  for (int64_t chunk : {int64_t{1} << 22, int64_t{65536}, int64_t{1000}}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    const std::vector<uint8_t> device_bytes = RandomBytes(bytes, 1);
    std::unique_ptr<DeviceBuffer> pool = Put(*backend_, device_bytes);
    ASSERT_TRUE(backend_->Synchronize().ok());
    absl::StatusOr<std::unique_ptr<PoolStaging>> st =
        PoolStaging::Create(0, pool->data(), bytes, PoolStagingOptions{chunk, absl::Seconds(30)});
    ASSERT_TRUE(st.ok()) << st.status();
    PoolStaging& staging = **st;
    ASSERT_EQ(staging.bytes(), bytes);
    auto* mirror = static_cast<uint8_t*>(staging.host());
    std::fill(mirror, mirror + bytes, 0x5a);

    // device → mirror: exactly the ranges arrive, nothing else changes.
    ASSERT_TRUE(staging.ToHost(ranges).ok());
    std::vector<uint8_t> want(bytes, 0x5a);
    for (const ByteRange& r : ranges) {
      std::copy_n(device_bytes.begin() + r.offset, r.length, want.begin() + r.offset);
    }
    ASSERT_TRUE(std::equal(want.begin(), want.end(), mirror)) << "mirror after ToHost";

    // mirror → device: the transport wrote new bytes into the mirror.
    const std::vector<uint8_t> pulled = RandomBytes(bytes, 2);
    std::copy(pulled.begin(), pulled.end(), mirror);
    ASSERT_TRUE(staging.ToDevice(ranges).ok());
    std::vector<uint8_t> want_device = device_bytes;
    for (const ByteRange& r : ranges) {
      std::copy_n(pulled.begin() + r.offset, r.length, want_device.begin() + r.offset);
    }
    EXPECT_EQ(Get<uint8_t>(*backend_, *pool, bytes), want_device) << "pool after ToDevice";
  }
}

TEST_F(PoolStagingTest, RejectsRangesOutsideThePool) {
  std::unique_ptr<DeviceBuffer> pool = Put(*backend_, std::vector<uint8_t>(1000));
  absl::StatusOr<std::unique_ptr<PoolStaging>> st =
      PoolStaging::Create(0, pool->data(), 1000, PoolStagingOptions{});
  ASSERT_TRUE(st.ok()) << st.status();
  for (ByteRange bad : {ByteRange{990, 11}, ByteRange{-1, 5}, ByteRange{0, -1}}) {
    const std::vector<ByteRange> ranges = {{0, 10}, bad};
    const absl::Status s = (*st)->ToHost(ranges);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("range 1 ["), std::string::npos) << s;
    EXPECT_NE(s.message().find("leaves the pool of 1000 bytes"), std::string::npos) << s;
  }
  const absl::StatusOr<std::unique_ptr<PoolStaging>> bad =
      PoolStaging::Create(0, pool->data(), 1000, PoolStagingOptions{0, absl::Seconds(1)});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem::gpu
