// The in-process fake transport (kv_transfer/fake/) keeps KvPuller's contract: every byte of a
// planned transfer between two layouts lands, and each injected fault ends the pull with its
// specific status, within its bound, blaming the right source rank.
#include <atomic>
#include <numeric>
#include <thread>
#include <vector>

#include "attention/dcp_layout.h"
#include "gtest/gtest.h"
#include "kv_transfer/fake/fake_kv_puller.h"
#include "kv_transfer/fake/fake_kv_source.h"
#include "kv_transfer/planner.h"
#include "kv_transfer/ucx/testing/kv_pattern.h"
#include "kv_transfer/ucx/transfer_checks.h"
#include "tests/kv_transfer/status_matchers.h"

namespace tandem::testing {
namespace {

using ::tandem::fake::FakeFaults;
using ::tandem::fake::FakeKvNetwork;
using ::tandem::fake::FakeKvPuller;
using ::tandem::fake::FakeKvSource;
using ::tandem::fake::MetadataCorruption;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr ModelDims kTwoHeads{/*num_layers=*/2, /*num_q_heads=*/8, /*num_kv_heads=*/2,
                              /*head_dim=*/8};
constexpr int64_t kTokens = 77;

// A source (tp 2, dcp 2, block 8) filled with the self-describing pattern, and the plan of one
// request into a destination (tp 2, block 4, interleave 1): every destination rank reads both
// source DCP groups.
class FakeTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    src_ = KvLayout{ParallelConfig{4, 1, 2, 8, 1}, kTwoHeads, KvDType::kF32};
    dst_ = KvLayout{ParallelConfig{2, 1, 1, 4, 1}, kTwoHeads, KvDType::kF32};
    src_blocks_.resize(VirtualBlocksFor(src_.parallel.dcp_geometry(), kTokens));
    std::iota(src_blocks_.rbegin(), src_blocks_.rend(), 3);  // descending, not from 0
    dst_blocks_.resize(VirtualBlocksFor(dst_.parallel.dcp_geometry(), kTokens));
    std::iota(dst_blocks_.begin(), dst_blocks_.end(), 1);
    KvSourceOptions o;
    o.engine_id = "p0";
    o.epoch = 3;
    o.compat_hash = CompatibilityHash("m", src_);
    o.layout = src_;
    o.pool_bytes_per_rank = PoolBytesForBlocks(src_, src_blocks_);
    absl::StatusOr<std::unique_ptr<FakeKvSource>> source = FakeKvSource::Create(&net_, o);
    ASSERT_OK(source);
    source_ = std::move(*source);
    for (int32_t r = 0; r < source_->world(); ++r) {
      KvPoolMemory& pool = source_->pool(r);
      FillSourcePool(src_, r, src_blocks_, kTokens,
                     absl::Span<std::byte>(static_cast<std::byte*>(pool.base()), pool.bytes()));
    }
    absl::StatusOr<TransferPlan> plan =
        PlanKvTransfer(src_, src_blocks_, dst_, dst_blocks_, kTokens);
    ASSERT_OK(plan);
    plan_ = std::move(*plan);
    for (int32_t d = 0; d < dst_.world(); ++d) {
      absl::StatusOr<std::unique_ptr<KvPoolMemory>> pool =
          puller_.AllocatePool(PoolBytesForBlocks(dst_, dst_blocks_));
      ASSERT_OK(pool);
      PoisonPool(Bytes(**pool));
      pools_.push_back(std::move(*pool));
    }
  }

  static absl::Span<std::byte> Bytes(KvPoolMemory& pool) {
    return absl::Span<std::byte>(static_cast<std::byte*>(pool.base()), pool.bytes());
  }

  absl::Status Pull(int32_t d, PullOptions options) {
    return puller_.Execute(source_->metadata(), plan_.copies[d], Bytes(*pools_[d]), options);
  }

  static PullOptions Options(absl::Duration stall = absl::Seconds(5),
                             std::vector<int32_t>* blamed = nullptr) {
    PullOptions o;
    o.stall_timeout = stall;
    o.failed_source_ranks = blamed;
    return o;
  }

  FakeKvNetwork net_;
  FakeKvPuller puller_{&net_};
  KvLayout src_, dst_;
  std::vector<int32_t> src_blocks_, dst_blocks_;
  std::unique_ptr<FakeKvSource> source_;
  TransferPlan plan_;
  std::vector<std::unique_ptr<KvPoolMemory>> pools_;
};

TEST_F(FakeTransportTest, PullsEveryByteOfThePlan) {
  ASSERT_OK(CheckHandshake(CompatibilityHash("m", dst_), source_->metadata()));
  for (int32_t d = 0; d < dst_.world(); ++d) {
    PullProgress progress;
    PullOptions o = Options();
    o.progress = &progress;
    ASSERT_OK(Pull(d, o));
    EXPECT_EQ(progress.completed.load(), static_cast<int64_t>(plan_.copies[d].size()));
    EXPECT_OK(VerifyDestinationPool(dst_, d, dst_blocks_, kTokens, Bytes(*pools_[d])));
  }
  EXPECT_EQ(net_.bytes("p0"), plan_.total_bytes());
  EXPECT_EQ(net_.copies("p0"), plan_.total_copies());
}

TEST_F(FakeTransportTest, FailedCopyIsUnavailableAndBlamesItsRank) {
  net_.SetFaults("p0", FakeFaults{.fail_copy = 2});
  std::vector<int32_t> blamed;
  EXPECT_THAT(Pull(0, Options(absl::Seconds(5), &blamed)),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("failed (injected, copy 2)")));
  EXPECT_THAT(blamed, ElementsAre(plan_.copies[0][2].src_rank));
  // A transient failure: the next pull succeeds.
  ASSERT_OK(Pull(0, Options()));
  EXPECT_OK(VerifyDestinationPool(dst_, 0, dst_blocks_, kTokens, Bytes(*pools_[0])));
}

TEST_F(FakeTransportTest, ShortCompletionIsDataLoss) {
  net_.SetFaults("p0", FakeFaults{.short_copy = 1});
  EXPECT_THAT(Pull(1, Options()), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("completed")));
}

TEST_F(FakeTransportTest, StallIsDeadlineExceededWithinTheStallTimeout) {
  net_.SetFaults("p0", FakeFaults{.stall_after_bytes = plan_.copies[0][0].length});
  std::vector<int32_t> blamed;
  const absl::Time t0 = absl::Now();
  EXPECT_THAT(Pull(0, Options(absl::Milliseconds(150), &blamed)),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("stalled")));
  const absl::Duration took = absl::Now() - t0;
  EXPECT_GE(took, absl::Milliseconds(150));
  EXPECT_LT(took, absl::Seconds(3));
  EXPECT_THAT(blamed, ElementsAre(plan_.copies[0][1].src_rank));
}

TEST_F(FakeTransportTest, SourceDyingAfterSomeBytesIsUnavailableForLaterPullsToo) {
  net_.SetFaults("p0", FakeFaults{.die_after_bytes = 1});
  EXPECT_THAT(Pull(0, Options()), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("died")));
  EXPECT_EQ(net_.copies("p0"), 1);
  EXPECT_THAT(Pull(1, Options()), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("dead")));
}

TEST_F(FakeTransportTest, DestroyedSourceIsUnavailable) {
  const TransferMetadata metadata = source_->metadata();
  source_.reset();
  std::vector<int32_t> blamed;
  EXPECT_THAT(puller_.Execute(metadata, plan_.copies[0], Bytes(*pools_[0]),
                              Options(absl::Seconds(5), &blamed)),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("destroyed")));
  EXPECT_EQ(blamed.size(), 1u);
}

TEST_F(FakeTransportTest, CorruptMetadataIsRefusedBeforeAnythingMoves) {
  source_->CorruptMetadata(MetadataCorruption::kTruncatedRkey);
  EXPECT_THAT(Pull(0, Options()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rkey is truncated")));
  source_->CorruptMetadata(MetadataCorruption::kWrongPoolBase);
  EXPECT_THAT(Pull(0, Options()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ranks[0].rkey")));
  source_->CorruptMetadata(MetadataCorruption::kMissingRank);
  EXPECT_THAT(Pull(0, Options()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ranks has 3 entries")));
  EXPECT_EQ(net_.bytes("p0"), 0);
}

TEST_F(FakeTransportTest, WrongPoolBaseIsRefusedByThePuller) {
  source_->CorruptMetadata(MetadataCorruption::kWrongPoolBase);
  const int32_t rank = plan_.copies[0][0].src_rank;
  if (rank != 0) GTEST_SKIP() << "plan does not read source rank 0 first";
  EXPECT_THAT(Pull(0, Options()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is not what")));
  EXPECT_EQ(net_.bytes("p0"), 0);
}

TEST_F(FakeTransportTest, CancelWhilePausedIsCancelledAndWritesNothingAfter) {
  net_.SetFaults("p0", FakeFaults{.paused = true});
  CancellationToken cancel;
  PullOptions o = Options(absl::Seconds(30));
  o.cancel = &cancel;
  absl::Status status;
  std::thread pull([&] { status = Pull(0, o); });
  const absl::Time limit = absl::Now() + absl::Seconds(10);
  while (net_.paused_waiters("p0") == 0 && absl::Now() < limit)
    absl::SleepFor(absl::Milliseconds(1));
  ASSERT_EQ(net_.paused_waiters("p0"), 1);
  const absl::Time t0 = absl::Now();
  cancel.Cancel();
  pull.join();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(1));
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kCancelled, HasSubstr("after 0 of")));
  EXPECT_EQ(net_.bytes("p0"), 0);
}

TEST_F(FakeTransportTest, PausedPullResumesAndCompletes) {
  net_.SetFaults("p0", FakeFaults{.paused = true});
  absl::Status status;
  std::thread pull([&] { status = Pull(1, Options(absl::Seconds(30))); });
  const absl::Time limit = absl::Now() + absl::Seconds(10);
  while (net_.paused_waiters("p0") == 0 && absl::Now() < limit)
    absl::SleepFor(absl::Milliseconds(1));
  ASSERT_EQ(net_.paused_waiters("p0"), 1);
  net_.Resume("p0");
  pull.join();
  ASSERT_OK(status);
  EXPECT_OK(VerifyDestinationPool(dst_, 1, dst_blocks_, kTokens, Bytes(*pools_[1])));
}

TEST_F(FakeTransportTest, RejectsBadOptionsAndOutOfBoundsCopies) {
  PullOptions o = Options();
  o.max_in_flight = 0;
  EXPECT_THAT(Pull(0, o), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("max_in_flight")));
  EXPECT_THAT(Pull(0, Options(absl::ZeroDuration())),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("stall_timeout")));
  const int64_t local_bytes = pools_[0]->bytes();
  std::vector<TransferCopy> beyond = {TransferCopy{0, 0, local_bytes - 4, 8}};
  EXPECT_THAT(puller_.Execute(source_->metadata(), beyond, Bytes(*pools_[0]), Options()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("copy 0")));
}

}  // namespace
}  // namespace tandem::testing
