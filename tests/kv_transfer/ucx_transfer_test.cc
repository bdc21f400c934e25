// Two processes, real UCX: a source peer process fills its pools for one layout and publishes
// its metadata over a pipe; this process, with a different layout, checks the handshake, plans
// with the planner, pulls every destination rank's copies with its own UcxKvPuller and verifies
// every byte — over shared memory and over TCP loopback.
#include <sys/wait.h>

#include <string>
#include <tuple>
#include <vector>

#include "attention/dcp_layout.h"
#include "gtest/gtest.h"
#include "kv_transfer/planner.h"
#include "kv_transfer/transfer_types.h"
#include "kv_transfer/ucx/kv_puller.h"
#include "kv_transfer/ucx/testing/kv_pattern.h"
#include "kv_transfer/ucx/transfer_checks.h"
#include "tests/kv_transfer/status_matchers.h"
#include "tests/kv_transfer/ucx_test_env.h"

namespace tandem::testing {
namespace {

struct LayoutPair {
  std::string name;
  ModelDims dims;
  KvDType dtype;
  ParallelConfig src;
  ParallelConfig dst;
  int64_t tokens;
  bool contiguous_tables;  // consecutive block ids on both sides (lets the planner merge runs)
};

constexpr ModelDims kFourHeads{/*num_layers=*/2, /*num_q_heads=*/8, /*num_kv_heads=*/4,
                               /*head_dim=*/8};
constexpr ModelDims kTwoHeads{2, 8, 2, 8};
constexpr ModelDims kOneHead{3, 6, 1, 4};

ParallelConfig P(int32_t tp, int32_t pcp, int32_t dcp, int32_t B, int32_t I) {
  return ParallelConfig{tp, pcp, dcp, B, I};
}

const std::vector<LayoutPair>& Pairs() {
  static const auto* pairs = new std::vector<LayoutPair>{
      {"Matched_Tp2_BlockGranular", kFourHeads, KvDType::kF32, P(2, 1, 1, 16, 16),
       P(2, 1, 1, 16, 16), 150, true},
      {"Dcp2To1", kTwoHeads, KvDType::kF32, P(4, 1, 2, 8, 1), P(2, 1, 1, 8, 1), 77, false},
      {"Dcp1To2", kTwoHeads, KvDType::kF32, P(2, 1, 1, 8, 1), P(4, 1, 2, 8, 1), 77, false},
      {"Dcp2To3", kOneHead, KvDType::kF16, P(2, 1, 2, 4, 1), P(3, 1, 3, 4, 2), 61, false},
      {"HeadSplit_Tp1To4", kFourHeads, KvDType::kF32, P(1, 1, 1, 8, 8), P(4, 1, 1, 8, 8), 40, true},
      {"HeadMerge_Tp4To1", kFourHeads, KvDType::kBF16, P(4, 1, 1, 8, 8), P(1, 1, 1, 8, 8), 45,
       false},
      {"BlockSize16To4", kTwoHeads, KvDType::kF32, P(2, 1, 1, 16, 16), P(2, 1, 1, 4, 4), 70, false},
      {"Interleave1To4_Dcp2", kOneHead, KvDType::kF32, P(2, 1, 2, 8, 1), P(2, 1, 2, 8, 4), 90,
       false},
      {"PcpReplicas_Tp2Pcp2ToTp2", kTwoHeads, KvDType::kF32, P(2, 2, 1, 8, 8), P(2, 1, 1, 8, 8), 66,
       false},
      {"PcpDcp_Tp2Pcp2Dcp2ToTp4Dcp2", kTwoHeads, KvDType::kF16, P(2, 2, 2, 8, 2), P(4, 1, 2, 8, 2),
       83, false},
      {"Dcp2ToNonDcpHeadMerge_Tp4ToTp1", kTwoHeads, KvDType::kF32, P(4, 1, 2, 8, 8),
       P(1, 1, 1, 8, 8), 100, false},
      {"TokenGranular_B16I1ToB4I1", kFourHeads, KvDType::kBF16, P(1, 1, 1, 16, 1), P(2, 1, 1, 4, 1),
       33, false},
  };
  return *pairs;
}

class UcxTransferTest : public ::testing::TestWithParam<std::tuple<Transport, LayoutPair>> {};

TEST_P(UcxTransferTest, PullsEveryByteAcrossProcesses) {
  const auto& [transport, pair] = GetParam();
  const KvLayout src{pair.src, pair.dims, pair.dtype};
  const KvLayout dst{pair.dst, pair.dims, pair.dtype};
  const int64_t src_used = VirtualBlocksFor(pair.src.dcp_geometry(), pair.tokens);
  const int64_t dst_used = VirtualBlocksFor(pair.dst.dcp_geometry(), pair.tokens);
  SourcePeerConfig config;
  config.engine_id = "prefill-" + pair.name;
  config.epoch = 7;
  config.compat_hash = CompatibilityHash("test-model", src);
  config.layout = src;
  config.blocks =
      pair.contiguous_tables ? StridedBlocks(src_used, 1, 0) : DescendingOddBlocks(src_used);
  config.num_tokens = pair.tokens;
  const std::vector<int32_t> dst_blocks =
      pair.contiguous_tables ? StridedBlocks(dst_used, 1, 0) : StridedBlocks(dst_used, 2, 2);

  absl::StatusOr<std::unique_ptr<SourcePeerProcess>> peer = SpawnPeer(transport, config);
  ASSERT_OK(peer);
  const TransferMetadata& metadata = (*peer)->metadata();
  ASSERT_OK(CheckHandshake(CompatibilityHash("test-model", dst), metadata));
  absl::StatusOr<TransferPlan> plan =
      PlanKvTransfer(metadata.layout, config.blocks, dst, dst_blocks, pair.tokens);
  ASSERT_OK(plan);
  ASSERT_EQ(plan->copies.size(), static_cast<size_t>(dst.world()));

  for (int32_t d = 0; d < dst.world(); ++d) {
    SCOPED_TRACE(::testing::Message() << "destination rank " << d);
    absl::StatusOr<std::unique_ptr<UcxKvPuller>> puller =
        UcxKvPuller::Create(UcxKvPullerOptions{UcxOptions{UcxSettings(transport)}});
    ASSERT_OK(puller);
    absl::StatusOr<std::unique_ptr<KvPoolMemory>> pool =
        (*puller)->AllocatePool(PoolBytesForBlocks(dst, dst_blocks));
    ASSERT_OK(pool);
    const absl::Span<std::byte> bytes(static_cast<std::byte*>((*pool)->base()),
                                      static_cast<size_t>((*pool)->bytes()));
    PoisonPool(bytes);
    PullProgress progress;
    PullOptions options;
    options.max_in_flight = 4;  // small, so the window refills many times
    options.stall_timeout = absl::Seconds(20);
    options.progress = &progress;
    ASSERT_OK((*puller)->Execute(metadata, plan->copies[d], bytes, options));
    EXPECT_EQ(progress.completed.load(), static_cast<int64_t>(plan->copies[d].size()));
    EXPECT_OK(VerifyDestinationPool(dst, d, dst_blocks, pair.tokens, bytes));
  }
  absl::StatusOr<int> exit_status = (*peer)->Shutdown(absl::Seconds(20));
  ASSERT_OK(exit_status);
  EXPECT_TRUE(WIFEXITED(*exit_status) && WEXITSTATUS(*exit_status) == 0) << *exit_status;
}

INSTANTIATE_TEST_SUITE_P(LayoutPairs, UcxTransferTest,
                         ::testing::Combine(::testing::Values(Transport::kSharedMemory,
                                                              Transport::kTcp),
                                            ::testing::ValuesIn(Pairs())),
                         [](const auto& info) {
                           return TransportName(std::get<0>(info.param)) + "_" +
                                  std::get<1>(info.param).name;
                         });

}  // namespace
}  // namespace tandem::testing
