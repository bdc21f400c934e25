// GPU-direct KV's UCX side on any machine (docs/gpu.md#gpu-direct-kv), with real UCX in one
// process: the memory types a context reports, device pools refused by a UCX without CUDA,
// pools registered in place (UcxPool::Register) carrying their memory type into the metadata
// and receiving pulls, and source pools described as device memory pulled through UCX gets
// only (never the memcpy of a mapped pool) with the same bytes arriving.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kv_transfer/ucx/kv_puller.h"
#include "kv_transfer/ucx/transfer_source.h"
#include "kv_transfer/ucx/ucx_pool.h"
#include "kv_transfer/ucx/ucx_worker.h"
#include "tests/kv_transfer/status_matchers.h"
#include "tests/kv_transfer/ucx_test_env.h"

namespace tandem::testing {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kPoolBytes = 1 << 16;

// Host memory handed out like a device pool would be, remembering where it went.
class HostMemory final : public KvPoolMemory {
 public:
  explicit HostMemory(int64_t bytes) : bytes_(static_cast<size_t>(bytes)) {}
  void* base() const override { return const_cast<std::byte*>(bytes_.data()); }
  int64_t bytes() const override { return static_cast<int64_t>(bytes_.size()); }

 private:
  std::vector<std::byte> bytes_;
};

KvPoolAllocator HostAllocator(std::vector<void*>* handed_out) {
  return [handed_out](int32_t, int64_t bytes) -> absl::StatusOr<std::unique_ptr<KvPoolMemory>> {
    auto memory = std::make_unique<HostMemory>(bytes);
    handed_out->push_back(memory->base());
    return std::unique_ptr<KvPoolMemory>(std::move(memory));
  };
}

UcxTransferSourceOptions SourceOptions() {
  UcxTransferSourceOptions o;
  o.engine_id = "prefill-memory-types";
  o.epoch = 3;
  o.layout = KvLayout{ParallelConfig{2, 1, 1, 16, 16}, ModelDims{2, 4, 2, 8}, KvDType::kF32};
  o.pool_bytes_per_rank = kPoolBytes;
  o.ucx.config = UcxSettings(Transport::kSharedMemory);
  return o;
}

void Fill(const KvSource& source) {
  for (int32_t r = 0; r < source.world(); ++r) {
    auto* bytes = static_cast<unsigned char*>(source.pool(r).base());
    for (int64_t i = 0; i < kPoolBytes; ++i) bytes[i] = static_cast<unsigned char>(i * 13 + r);
  }
}

// Rank 1's second half, then rank 0's first half.
const std::vector<TransferCopy>& Copies() {
  static const auto* copies = new std::vector<TransferCopy>{{1, kPoolBytes / 2, 0, kPoolBytes / 2},
                                                            {0, 0, kPoolBytes / 2, kPoolBytes / 2}};
  return *copies;
}

void ExpectPulled(const KvSource& source, const std::byte* local) {
  EXPECT_EQ(std::memcmp(local, static_cast<const char*>(source.pool(1).base()) + kPoolBytes / 2,
                        kPoolBytes / 2),
            0);
  EXPECT_EQ(std::memcmp(local + kPoolBytes / 2, source.pool(0).base(), kPoolBytes / 2), 0);
}

TEST(UcxMemoryTypeTest, ContextReportsCudaOnlyWithACudaTransport) {
  absl::StatusOr<std::unique_ptr<UcxContext>> context = UcxContext::Create(UcxOptions{});
  ASSERT_OK(context);
  EXPECT_THAT((*context)->memory_type_names(), HasSubstr("host"));
  const std::vector<std::string>& resources = (*context)->resources();
  const bool cuda_transport = std::any_of(resources.begin(), resources.end(), [](auto& r) {
    return r.rfind("cuda_copy/", 0) == 0 || r.rfind("cuda_ipc/", 0) == 0;
  });
  if ((*context)->supports_cuda_memory()) {
    EXPECT_TRUE(cuda_transport);
    EXPECT_THAT((*context)->memory_type_names(), HasSubstr("cuda"));
  }
  if (!cuda_transport) {
    EXPECT_FALSE((*context)->supports_cuda_memory()) << (*context)->memory_type_names();
    EXPECT_EQ((*context)->memory_types(), uint64_t{1} << UCS_MEMORY_TYPE_HOST);
    EXPECT_EQ((*context)->memory_type_names(), "host");
  }
}

TEST(UcxMemoryTypeTest, DevicePoolsAreRefusedByAUcxWithoutCuda) {
  absl::StatusOr<std::unique_ptr<UcxContext>> context = UcxContext::Create(UcxOptions{});
  ASSERT_OK(context);
  if ((*context)->supports_cuda_memory()) {
    GTEST_SKIP() << "this UCX reports CUDA memory (" << (*context)->memory_type_names()
                 << "); the refusal is for a UCX without it";
  }
  std::vector<void*> handed_out;
  UcxTransferSourceOptions so = SourceOptions();
  so.device_pools = HostAllocator(&handed_out);
  EXPECT_THAT(UcxTransferSource::Create(so),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("reports no CUDA memory type (memory types: host)")));

  UcxKvPullerOptions po{UcxOptions{UcxSettings(Transport::kSharedMemory)}};
  po.device_pools = HostAllocator(&handed_out);
  EXPECT_THAT(UcxKvPuller::Create(po),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("device pools need a CUDA-aware UCX; this one reports memory "
                                 "types host")));

  EXPECT_THAT(UcxPool::Register(*std::move(context), nullptr, KvMemoryType::kHost),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("got none")));
}

TEST(UcxMemoryTypeTest, PullsIntoAPoolRegisteredInPlace) {
  absl::StatusOr<std::unique_ptr<UcxTransferSource>> source =
      UcxTransferSource::Create(SourceOptions());
  ASSERT_OK(source);
  for (const RankTransferInfo& r : (*source)->metadata().ranks) {
    EXPECT_EQ(r.memory_type, KvMemoryType::kHost);
  }
  Fill(**source);

  // The device-pool path of the puller, with host memory registered as host memory.
  std::vector<void*> handed_out;
  UcxKvPullerOptions po{UcxOptions{UcxSettings(Transport::kSharedMemory)}};
  po.device_pools = HostAllocator(&handed_out);
  po.device_pool_memory = KvMemoryType::kHost;
  absl::StatusOr<std::unique_ptr<UcxKvPuller>> puller = UcxKvPuller::Create(po);
  ASSERT_OK(puller);
  EXPECT_EQ((*puller)->local_memory(), KvMemoryType::kHost);
  absl::StatusOr<std::unique_ptr<KvPoolMemory>> pool = (*puller)->AllocatePool(kPoolBytes);
  ASSERT_OK(pool);
  ASSERT_EQ(handed_out.size(), 1u);
  EXPECT_EQ((*pool)->base(), handed_out[0]);  // registered where it was, not copied
  EXPECT_EQ((*pool)->bytes(), kPoolBytes);
  auto* registered = dynamic_cast<UcxPool*>(pool->get());
  ASSERT_NE(registered, nullptr);
  EXPECT_EQ(registered->memory_type(), KvMemoryType::kHost);
  EXPECT_FALSE(registered->packed_rkey().empty());

  auto* local = static_cast<std::byte*>((*pool)->base());
  std::fill(local, local + kPoolBytes, std::byte{0xa5});
  PullOptions options;
  options.stall_timeout = absl::Seconds(20);
  ASSERT_OK((*puller)->Execute((*source)->metadata(), Copies(),
                               absl::MakeSpan(local, static_cast<size_t>(kPoolBytes)), options));
  ExpectPulled(**source, local);
}

TEST(UcxMemoryTypeTest, SourcePoolsDescribedAsDeviceMemoryArePulledByGets) {
  for (const Transport transport : {Transport::kSharedMemory, Transport::kTcp}) {
    SCOPED_TRACE(TransportName(transport));
    UcxTransferSourceOptions so = SourceOptions();
    so.ucx.config = UcxSettings(transport);
    absl::StatusOr<std::unique_ptr<UcxTransferSource>> source = UcxTransferSource::Create(so);
    ASSERT_OK(source);
    Fill(**source);
    // Host memory underneath (UCX reads it either way); the label forbids the CPU from loading
    // it, so the puller must not take its mapped-pool memcpy or gather path.
    TransferMetadata device = (*source)->metadata();
    for (RankTransferInfo& r : device.ranks) r.memory_type = KvMemoryType::kCuda;

    UcxKvPullerOptions po{UcxOptions{UcxSettings(transport)}};
    po.gather.min_direct_bytes = kPoolBytes;  // would gather both copies if it were allowed to
    po.gather.max_segment_bytes = kPoolBytes;
    absl::StatusOr<std::unique_ptr<UcxKvPuller>> puller = UcxKvPuller::Create(po);
    ASSERT_OK(puller);
    std::vector<std::byte> local(kPoolBytes, std::byte{0xa5});
    PullProgress progress;
    PullOptions options;
    options.stall_timeout = absl::Seconds(20);
    options.progress = &progress;
    ASSERT_OK((*puller)->Execute(device, Copies(), absl::MakeSpan(local), options));
    ExpectPulled(**source, local.data());
    EXPECT_EQ(progress.completed.load(), 2);
    EXPECT_EQ(progress.completed_bytes.load(), kPoolBytes);
  }
}

}  // namespace
}  // namespace tandem::testing
