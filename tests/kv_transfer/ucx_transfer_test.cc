// Two processes, real UCX: a source peer process fills its pools for one layout and publishes
// its metadata over a pipe; this process, with a different layout, checks the handshake, plans
// with the planner, pulls every destination rank's copies with its own UcxKvPuller and verifies
// every byte — over shared memory and over TCP loopback, with the puller's default read paths
// and (UcxPullModeTest) with one get per copy or gathered gets on shared memory too.
#include <sys/wait.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "attention/dcp_layout.h"
#include "gtest/gtest.h"
#include "kv_transfer/gather_plan.h"
#include "kv_transfer/planner.h"
#include "kv_transfer/transfer_types.h"
#include "kv_transfer/ucx/kv_puller.h"
#include "kv_transfer/ucx/remote_rank.h"
#include "kv_transfer/ucx/testing/kv_pattern.h"
#include "kv_transfer/ucx/transfer_checks.h"
#include "kv_transfer/ucx/ucx_worker.h"
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

// How the puller reads: its defaults (mapped pools by memcpy, small copies gathered), or with
// one of those off, or every mapped-pool copy with non-temporal stores (the defaults use them
// only for pulls of 4 MiB and more) — each path must deliver the same bytes.
enum class Mode { kDefault, kGetPerCopy, kGatherWithoutMapping, kStreamingStores };

std::string ModeName(Mode m) {
  switch (m) {
    case Mode::kDefault:
      return "Default";
    case Mode::kGetPerCopy:
      return "GetPerCopy";
    case Mode::kGatherWithoutMapping:
      return "GatherWithoutMapping";
    case Mode::kStreamingStores:
      return "StreamingStores";
  }
  return "?";
}

UcxKvPullerOptions PullerOptions(Transport transport, Mode mode) {
  UcxKvPullerOptions o{UcxOptions{UcxSettings(transport)}};
  o.read_mapped_pools = mode == Mode::kDefault || mode == Mode::kStreamingStores;
  o.gather_small_copies = mode != Mode::kGetPerCopy;
  if (mode == Mode::kStreamingStores) o.stream_copy_min_bytes = 0;
  // Small segments and few slots, so a pull of these tiny pools still needs many segments and
  // reuses every staging slot.
  o.gather.min_direct_bytes = 256;
  o.gather.max_segment_bytes = 512;
  o.staging_slots = 3;
  return o;
}

void PullAndVerify(Transport transport, Mode mode, const LayoutPair& pair) {
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
    absl::StatusOr<std::unique_ptr<UcxKvPuller>> puller = UcxKvPuller::Create(
        mode == Mode::kDefault ? UcxKvPullerOptions{UcxOptions{UcxSettings(transport)}}
                               : PullerOptions(transport, mode));
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

class UcxTransferTest : public ::testing::TestWithParam<std::tuple<Transport, LayoutPair>> {};

TEST_P(UcxTransferTest, PullsEveryByteAcrossProcesses) {
  const auto& [transport, pair] = GetParam();
  PullAndVerify(transport, Mode::kDefault, pair);
}

INSTANTIATE_TEST_SUITE_P(LayoutPairs, UcxTransferTest,
                         ::testing::Combine(::testing::Values(Transport::kSharedMemory,
                                                              Transport::kTcp),
                                            ::testing::ValuesIn(Pairs())),
                         [](const auto& info) {
                           return TransportName(std::get<0>(info.param)) + "_" +
                                  std::get<1>(info.param).name;
                         });

// Shared memory: UCX maps the source pool into this process and RemoteRank exposes it, holding
// exactly the bytes a get reads. TCP: no mapping (the puller must use gets).
TEST(UcxRemoteRankTest, MapsTheSourcePoolOnSharedMemoryOnly) {
  const LayoutPair& pair = Pairs().front();  // matched, contiguous tables
  const KvLayout src{pair.src, pair.dims, pair.dtype};
  for (const Transport transport : {Transport::kSharedMemory, Transport::kTcp}) {
    SCOPED_TRACE(TransportName(transport));
    SourcePeerConfig config;
    config.engine_id = "prefill-mapped";
    config.compat_hash = CompatibilityHash("test-model", src);
    config.layout = src;
    config.blocks = StridedBlocks(VirtualBlocksFor(pair.src.dcp_geometry(), pair.tokens), 1, 0);
    config.num_tokens = pair.tokens;
    absl::StatusOr<std::unique_ptr<SourcePeerProcess>> peer = SpawnPeer(transport, config);
    ASSERT_OK(peer);
    const RankTransferInfo& info = (*peer)->metadata().ranks[0];
    absl::StatusOr<std::unique_ptr<UcxContext>> context =
        UcxContext::Create(UcxOptions{UcxSettings(transport)});
    ASSERT_OK(context);
    absl::StatusOr<std::unique_ptr<UcxWorker>> worker =
        UcxWorker::Create(std::shared_ptr<UcxContext>(*std::move(context)));
    ASSERT_OK(worker);
    absl::StatusOr<std::unique_ptr<RemoteRank>> remote =
        RemoteRank::Connect(worker->get(), info, "source rank 0");
    ASSERT_OK(remote);
    if (transport == Transport::kTcp) {
      EXPECT_EQ((*remote)->mapped_pool(), nullptr);
    } else {
      ASSERT_NE((*remote)->mapped_pool(), nullptr);
      // The same bytes through a get (pulled with one get per copy into a local buffer).
      absl::StatusOr<std::unique_ptr<UcxKvPuller>> puller =
          UcxKvPuller::Create(PullerOptions(transport, Mode::kGetPerCopy));
      ASSERT_OK(puller);
      std::vector<std::byte> local(static_cast<size_t>(info.pool_bytes));
      const std::vector<TransferCopy> whole = {TransferCopy{0, 0, 0, info.pool_bytes}};
      PullOptions options;
      ASSERT_OK((*puller)->Execute((*peer)->metadata(), whole, absl::MakeSpan(local), options));
      EXPECT_EQ(std::memcmp(local.data(), (*remote)->mapped_pool(), local.size()), 0);
    }
    remote->reset();
    ASSERT_OK((*peer)->Shutdown(absl::Seconds(20)));
  }
}

// A prefix-cache hit's table, as one report once saw it decode wrong tokens over TCP: one big
// direct copy (blocks 0-73 of a 1,200-token prompt) followed by one small gathered segment (8 KiB
// from elsewhere in the pool, landing right after the big one). Byte for byte against the same
// bytes read with one plain get, three pulls on the cached connection and one on a fresh one.
TEST(UcxPullShapeTest, OneBigDirectCopyThenOneSmallGatheredCopyEveryByte) {
  constexpr ModelDims kDims{/*num_layers=*/2, /*num_q_heads=*/8, /*num_kv_heads=*/2,
                            /*head_dim=*/64};
  const KvLayout layout{P(1, 1, 1, 16, 16), kDims, KvDType::kF32};
  constexpr int64_t kTokens = 1200;
  constexpr int64_t kSmall = 8 * 1024;
  for (const Transport transport : {Transport::kTcp, Transport::kSharedMemoryAndTcp}) {
    SCOPED_TRACE(TransportName(transport));
    SourcePeerConfig config;
    config.engine_id = "prefill-prefix-hit";
    config.compat_hash = CompatibilityHash("test-model", layout);
    config.layout = layout;
    config.blocks = StridedBlocks(VirtualBlocksFor(layout.parallel.dcp_geometry(), kTokens), 1, 0);
    config.num_tokens = kTokens;
    absl::StatusOr<std::unique_ptr<SourcePeerProcess>> peer = SpawnPeer(transport, config);
    ASSERT_OK(peer);
    const TransferMetadata& metadata = (*peer)->metadata();
    const int64_t pool_bytes = metadata.ranks[0].pool_bytes;
    const int64_t block_bytes = pool_bytes / static_cast<int64_t>(config.blocks.size());
    ASSERT_EQ(config.blocks.size(), 75u);
    const int64_t big = 74 * block_bytes;
    ASSERT_GE(big, GatherOptions{}.min_direct_bytes);
    // The small copy is two 4 KiB rows, contiguous on both sides: one 8 KiB segment, one piece.
    const std::vector<TransferCopy> copies = {
        TransferCopy{0, 0, 0, big}, TransferCopy{0, pool_bytes - kSmall, big, kSmall / 2},
        TransferCopy{0, pool_bytes - kSmall / 2, big + kSmall / 2, kSmall / 2}};
    const GatherPlan gather = PlanGather(copies, GatherOptions{}, [](int32_t) { return true; });
    ASSERT_EQ(gather.direct, std::vector<int64_t>{0});  // the big copy: one get into the pool
    ASSERT_EQ(gather.segments.size(), 1u);              // the small ones: gathered and scattered
    EXPECT_EQ(gather.segments[0].length, kSmall);
    EXPECT_EQ(gather.pieces.size(), 1u);

    // The whole pool through one plain get per copy: the bytes every pull must deliver.
    absl::StatusOr<std::unique_ptr<UcxKvPuller>> plain =
        UcxKvPuller::Create(PullerOptions(transport, Mode::kGetPerCopy));
    ASSERT_OK(plain);
    std::vector<std::byte> whole(static_cast<size_t>(pool_bytes));
    const std::vector<TransferCopy> all = {TransferCopy{0, 0, 0, pool_bytes}};
    PullOptions options;
    options.stall_timeout = absl::Seconds(20);
    ASSERT_OK((*plain)->Execute(metadata, all, absl::MakeSpan(whole), options));
    std::vector<std::byte> expected(whole.begin(), whole.begin() + big);
    expected.insert(expected.end(), whole.end() - kSmall, whole.end());

    for (int puller_index = 0; puller_index < 2; ++puller_index) {
      absl::StatusOr<std::unique_ptr<UcxKvPuller>> puller =
          UcxKvPuller::Create(UcxKvPullerOptions{UcxOptions{UcxSettings(transport)}});
      ASSERT_OK(puller);
      for (int pull = 0; pull < (puller_index == 0 ? 3 : 1); ++pull) {
        SCOPED_TRACE(::testing::Message() << "puller " << puller_index << " pull " << pull);
        std::vector<std::byte> local(expected.size());
        PoisonPool(absl::MakeSpan(local));
        ASSERT_OK((*puller)->Execute(metadata, copies, absl::MakeSpan(local), options));
        EXPECT_EQ(std::memcmp(local.data(), expected.data(), expected.size()), 0);
      }
    }
    plain->reset();
    absl::StatusOr<int> exit_status = (*peer)->Shutdown(absl::Seconds(20));
    ASSERT_OK(exit_status);
    EXPECT_TRUE(WIFEXITED(*exit_status) && WEXITSTATUS(*exit_status) == 0) << *exit_status;
  }
}

// The non-default read paths over the layouts where they differ most: token-granular (tiny
// copies, gathered) and DCP 2 → 1 (row copies from two source ranks).
class UcxPullModeTest : public ::testing::TestWithParam<std::tuple<Transport, Mode, std::string>> {
};

TEST_P(UcxPullModeTest, PullsEveryByteAcrossProcesses) {
  const auto& [transport, mode, name] = GetParam();
  const auto& pairs = Pairs();
  const auto it =
      std::find_if(pairs.begin(), pairs.end(), [&](const LayoutPair& p) { return p.name == name; });
  ASSERT_NE(it, pairs.end());
  PullAndVerify(transport, mode, *it);
}

INSTANTIATE_TEST_SUITE_P(
    Modes, UcxPullModeTest,
    ::testing::Combine(::testing::Values(Transport::kSharedMemory, Transport::kTcp),
                       ::testing::Values(Mode::kGetPerCopy, Mode::kGatherWithoutMapping),
                       ::testing::Values("TokenGranular_B16I1ToB4I1", "Dcp2To1")),
    [](const auto& info) {
      return TransportName(std::get<0>(info.param)) + "_" + ModeName(std::get<1>(info.param)) +
             "_" + std::get<2>(info.param);
    });

// Non-temporal stores from a mapped pool (shared memory only): block-granular copies merged into
// runs of blocks (several KiB: many 256-byte rounds) and a head merge (one head slab a copy).
INSTANTIATE_TEST_SUITE_P(StreamingStores, UcxPullModeTest,
                         ::testing::Combine(::testing::Values(Transport::kSharedMemory),
                                            ::testing::Values(Mode::kStreamingStores),
                                            ::testing::Values("Matched_Tp2_BlockGranular",
                                                              "HeadMerge_Tp4To1")),
                         [](const auto& info) {
                           return TransportName(std::get<0>(info.param)) + "_" +
                                  ModeName(std::get<1>(info.param)) + "_" + std::get<2>(info.param);
                         });

}  // namespace
}  // namespace tandem::testing
