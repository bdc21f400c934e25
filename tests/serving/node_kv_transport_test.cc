// ResolveNodeKvTransport (serving/node_kv_transport.h) with the real UCX this build links: off by
// default (no probe, no note, nothing changes); --kv_gpu_direct with a UCX that has no CUDA
// transport (Debian's) falls back to host memory and says so on stderr; contradictory flags are
// refused; and under the fallback the KV transfer the node's factories build is the host one,
// bytes pulled as before.
#include "serving/node_kv_transport.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kv_transfer/ucx/kv_puller.h"
#include "kv_transfer/ucx/testing/transports.h"
#include "kv_transfer/ucx/ucx_pool.h"
#include "kv_transfer/ucx/ucx_transport.h"
#include "tests/kv_transfer/status_matchers.h"

namespace tandem::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

UcxOptions Ucx() { return UcxOptions{UcxSettings(Transport::kSharedMemory)}; }

InstanceOptions Instance(const std::string& backend) {
  InstanceOptions o;
  o.backend = backend;
  return o;
}

bool UcxHasCuda() {
  absl::StatusOr<std::unique_ptr<UcxContext>> probe = UcxContext::Create(Ucx());
  return probe.ok() && (*probe)->supports_cuda_memory();
}

TEST(NodeKvTransportTest, OffByDefaultChangesNothingAndSaysNothing) {
  for (const char* backend : {"cpu", "cuda"}) {
    SCOPED_TRACE(backend);
    InstanceOptions instance = Instance(backend);
    ::testing::internal::CaptureStderr();
    absl::StatusOr<NodeKvTransport> t =
        ResolveNodeKvTransport("tandem-test", Ucx(), /*gpu_direct=*/false, &instance);
    EXPECT_THAT(::testing::internal::GetCapturedStderr(), IsEmpty());
    ASSERT_OK(t);
    EXPECT_EQ(t->choice.path,
              std::string(backend) == "cpu" ? KvPoolPath::kTransportPool : KvPoolPath::kHostMirror);
    EXPECT_FALSE(t->device_pools);
    EXPECT_EQ(instance.kv_staging, KvStaging::kAuto);
    EXPECT_EQ(t->ucx.config, Ucx().config);
  }
}

TEST(NodeKvTransportTest, WithoutCudaInUcxFallsBackToHostMirrorsAndLogsIt) {
  if (UcxHasCuda()) GTEST_SKIP() << "this UCX has CUDA: the fallback is for a UCX without it";
  InstanceOptions instance = Instance("cuda");
  ::testing::internal::CaptureStderr();
  absl::StatusOr<NodeKvTransport> t =
      ResolveNodeKvTransport("tandem-test", Ucx(), /*gpu_direct=*/true, &instance);
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_OK(t);
  EXPECT_EQ(t->choice.path, KvPoolPath::kHostMirror);
  EXPECT_THAT(log, HasSubstr("tandem-test: --kv_gpu_direct: this UCX has no CUDA transport "
                             "(memory types: host); falling back to host mirrors"));
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << log;
  EXPECT_FALSE(t->device_pools);
  EXPECT_EQ(instance.kv_staging, KvStaging::kAuto);  // the engine keeps its mirrors
}

TEST(NodeKvTransportTest, ContradictoryFlagsAreRefused) {
  InstanceOptions instance = Instance("cuda");
  instance.kv_staging = KvStaging::kAlways;
  EXPECT_THAT(ResolveNodeKvTransport("tandem-test", Ucx(), /*gpu_direct=*/true, &instance),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--kv_gpu_direct and --kv_staging=always contradict")));
}

TEST(NodeKvTransportTest, TheFallbackTransfersHostMemoryAsBefore) {
  if (UcxHasCuda()) GTEST_SKIP() << "this UCX has CUDA: the fallback is for a UCX without it";
  InstanceOptions instance = Instance("cpu");
  ::testing::internal::CaptureStderr();
  absl::StatusOr<NodeKvTransport> t =
      ResolveNodeKvTransport("tandem-test", Ucx(), /*gpu_direct=*/true, &instance);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), HasSubstr("falling back to host KV pools"));
  ASSERT_OK(t);
  EXPECT_EQ(t->choice.path, KvPoolPath::kTransportPool);

  // The node's factories, as tandem-prefill and tandem-decode build them from the choice.
  KvSourceOptions so;
  so.engine_id = "prefill-fallback";
  so.epoch = 9;
  so.layout = KvLayout{ParallelConfig{1, 1, 1, 16, 16}, ModelDims{2, 4, 2, 8}, KvDType::kF32};
  so.pool_bytes_per_rank = 1 << 16;
  absl::StatusOr<std::unique_ptr<KvSource>> source = UcxSourceFactory(t->ucx, t->device_pools)(so);
  ASSERT_OK(source);
  ASSERT_EQ((*source)->metadata().ranks.size(), 1u);
  EXPECT_EQ((*source)->metadata().ranks[0].memory_type, KvMemoryType::kHost);
  auto* src = static_cast<unsigned char*>((*source)->pool(0).base());
  for (int i = 0; i < (1 << 16); ++i) src[i] = static_cast<unsigned char>(i * 31 + 7);

  absl::StatusOr<std::unique_ptr<KvPuller>> puller = UcxPullerFactory(t->ucx, t->device_pools)(0);
  ASSERT_OK(puller);
  absl::StatusOr<std::unique_ptr<KvPoolMemory>> pool = (*puller)->AllocatePool(1 << 16);
  ASSERT_OK(pool);
  auto* ucx_pool = dynamic_cast<UcxPool*>(pool->get());
  ASSERT_NE(ucx_pool, nullptr);
  EXPECT_EQ(ucx_pool->memory_type(), KvMemoryType::kHost);
  auto* dst = static_cast<std::byte*>((*pool)->base());
  const std::vector<TransferCopy> copies = {{0, 4096, 0, 1 << 15}, {0, 0, 1 << 15, 4096}};
  PullOptions options;
  options.stall_timeout = absl::Seconds(20);
  ASSERT_OK((*puller)->Execute((*source)->metadata(), copies,
                               absl::MakeSpan(dst, static_cast<size_t>(1 << 16)), options));
  EXPECT_EQ(std::memcmp(dst, src + 4096, 1 << 15), 0);
  EXPECT_EQ(std::memcmp(dst + (1 << 15), src, 4096), 0);
}

}  // namespace
}  // namespace tandem::testing
