// OverlappedKvCheck: block ranges are checked on the lane as they land (before the rest of the
// pull), a corrupted range is caught, a full lane falls back to Finish, digests that arrive last
// (pipelined) queue what landed before, and destruction waits for queued checks. Pulls are
// simulated with memcpy of range plans (planner.h) between heap pools.
#include "kv_transfer/overlapped_kv_check.h"

#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "attention/dcp_layout.h"
#include "attention/pool_layout.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kv_transfer/copy_crcs.h"
#include "kv_transfer/kv_digest.h"
#include "kv_transfer/planner.h"
#include "tests/kv_transfer/plan_simulator.h"
#include "tests/kv_transfer/status_matchers.h"

namespace tandem {
namespace {

using tandem::testing::Rng;
using tandem::testing::StatusIs;
using ::testing::HasSubstr;

constexpr absl::Duration kWait = absl::Seconds(30);
constexpr int32_t kPoolBlocks = 32;
constexpr int64_t kTokens = 70;  // 5 blocks of 16, the last partial

KvLayout Layout(ParallelConfig p) { return KvLayout{p, ModelDims{2, 16, 2, 4}, KvDType::kF32}; }

struct Pools {
  std::vector<std::vector<std::byte>> bytes;
  std::vector<absl::Span<const std::byte>> Views() const {
    std::vector<absl::Span<const std::byte>> v;
    for (const auto& b : bytes) v.emplace_back(b.data(), b.size());
    return v;
  }
};

Pools MakePools(const KvLayout& l, Rng& rng) {
  Pools p;
  for (int32_t r = 0; r < l.world(); ++r) {
    p.bytes.emplace_back(static_cast<size_t>(PoolBytes(RankPoolGeometry(l, r), kPoolBlocks)));
    for (std::byte& b : p.bytes.back()) b = static_cast<std::byte>(rng.Next());
  }
  return p;
}

// TP2 prefill, B=16 → TP1 decode, B=16.
class OverlappedKvCheckTest : public ::testing::Test {
 protected:
  OverlappedKvCheckTest()
      : src_(Layout({2, 1, 1, 16, 16})),
        dst_(Layout({1, 1, 1, 16, 16})),
        rng_(5),
        sp_(MakePools(src_, rng_)),
        dp_(MakePools(dst_, rng_)) {
    for (int32_t i = 0; i < 5; ++i) {
      src_blocks_.push_back(3 + 2 * i);
      dst_blocks_.push_back(20 - i);
      gens_.push_back(static_cast<uint32_t>(i % 3));
    }
    absl::StatusOr<std::vector<uint32_t>> d =
        ComputeKvDigests(src_, sp_.Views(), kTokens, KvDigestBinding{"req", 9, src_blocks_, gens_});
    EXPECT_TRUE(d.ok()) << d.status();
    digests_ = *d;
  }

  OverlappedKvCheckInput Input() const {
    return OverlappedKvCheckInput{src_,        dst_,  kTokens,     "req",      9,
                                  src_blocks_, gens_, dst_blocks_, dp_.Views()};
  }
  // Lands tokens [begin, end) into the destination pools.
  void Land(int64_t begin, int64_t end) {
    absl::StatusOr<TransferPlan> plan =
        PlanKvTransferRange(src_, src_blocks_, dst_, dst_blocks_, kTokens, begin, end);
    ASSERT_TRUE(plan.ok()) << plan.status();
    for (size_t d = 0; d < plan->copies.size(); ++d) {
      for (const TransferCopy& c : plan->copies[d]) {
        std::memcpy(dp_.bytes[d].data() + c.dst_offset, sp_.bytes[c.src_rank].data() + c.src_offset,
                    static_cast<size_t>(c.length));
      }
    }
  }
  // Lands tokens [begin, end) as a puller that moves the bytes itself does: each copy CRCed in
  // the same pass (CopyWithCrcs with the check's requests); then tells `check`.
  void LandFused(OverlappedKvCheck& check, int64_t begin, int64_t end) {
    absl::StatusOr<TransferPlan> plan =
        PlanKvTransferRange(src_, src_blocks_, dst_, dst_blocks_, kTokens, begin, end);
    ASSERT_TRUE(plan.ok()) << plan.status();
    absl::StatusOr<std::vector<CopyCrcs>> crcs = check.CrcRequests(*plan);
    ASSERT_TRUE(crcs.ok()) << crcs.status();
    for (size_t d = 0; d < plan->copies.size(); ++d) {
      for (size_t i = 0; i < plan->copies[d].size(); ++i) {
        const TransferCopy& c = plan->copies[d][i];
        CopyWithCrcs(dp_.bytes[d].data() + c.dst_offset,
                     sp_.bytes[c.src_rank].data() + c.src_offset, c.length, &(*crcs)[d],
                     static_cast<int64_t>(i));
      }
    }
    check.Landed(end, &*plan, &*crcs);
  }
  // Waits until every job queued on lane 0 so far has run (lanes are FIFO).
  static void Drain(SerialWorkers& w) {
    absl::Notification n;
    ASSERT_TRUE(w.Submit(
                     0, [&] { n.Notify(); }, absl::Now() + kWait)
                    .ok());
    ASSERT_TRUE(n.WaitForNotificationWithTimeout(kWait));
  }

  const KvLayout src_, dst_;
  Rng rng_;
  Pools sp_, dp_;
  std::vector<int32_t> src_blocks_, dst_blocks_;
  std::vector<uint32_t> gens_;
  std::vector<uint32_t> digests_;
};

TEST_F(OverlappedKvCheckTest, ChecksEachRangeOnTheLaneAsItLands) {
  SerialWorkers w("check lane", 1, 8);
  OverlappedKvCheck check(Input(), &w, 0);
  ASSERT_TRUE(check.SetDigests(digests_).ok());
  Land(0, 32);
  check.Landed(32);
  Drain(w);
  EXPECT_EQ(check.early_checks(), 1);  // blocks 0-1 checked before the rest landed
  Land(32, 40);
  check.Landed(40);  // block 2 not whole yet: nothing new
  Drain(w);
  EXPECT_EQ(check.early_checks(), 1);
  Land(40, 64);
  check.Landed(64);
  Drain(w);
  EXPECT_EQ(check.early_checks(), 2);
  Land(64, kTokens);
  check.Landed(kTokens);  // the end of the pull: Finish checks the last block itself
  std::vector<KvDigestMismatch> bad;
  EXPECT_TRUE(check.Finish(&bad, 2).ok());
  EXPECT_TRUE(bad.empty());
  EXPECT_EQ(check.early_checks(), 2);
  EXPECT_GT(check.check_time(), absl::ZeroDuration());
}

TEST_F(OverlappedKvCheckTest, ACorruptedRangeIsCaughtOnTheLaneBeforeThePullEnds) {
  SerialWorkers w("check lane", 1, 8);
  OverlappedKvCheck check(Input(), &w, 0);
  ASSERT_TRUE(check.SetDigests(digests_).ok());
  Land(0, 16);
  // The first range landed with a flipped byte (a bad link, a bad pool).
  dp_.bytes[0][static_cast<size_t>(dst_blocks_[0]) *
               static_cast<size_t>(RankPoolGeometry(dst_, 0).block_bytes())] ^= std::byte{0x04};
  check.Landed(16);
  Drain(w);
  EXPECT_EQ(check.early_checks(), 1);
  Land(16, kTokens);
  check.Landed(kTokens);
  std::vector<KvDigestMismatch> bad;
  EXPECT_THAT(check.Finish(&bad, 1),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("KV digest mismatch in 1 of")));
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_EQ(bad[0].table_index, 0);
  EXPECT_EQ(bad[0].block, src_blocks_[0]);
}

TEST_F(OverlappedKvCheckTest, DigestsThatArriveLastQueueWhatLandedBefore) {
  SerialWorkers w("check lane", 1, 8);
  OverlappedKvCheck check(Input(), &w, 0);
  Land(0, 48);
  check.Landed(48);  // no digests yet (a pipelined prefill sends them with done)
  Drain(w);
  EXPECT_EQ(check.early_checks(), 0);
  ASSERT_TRUE(check.SetDigests(digests_).ok());
  Drain(w);
  EXPECT_EQ(check.early_checks(), 1);
  Land(48, kTokens);
  check.Landed(kTokens);
  EXPECT_TRUE(check.Finish(nullptr, 1).ok());
}

TEST_F(OverlappedKvCheckTest, AFullLaneLeavesTheBlocksToFinish) {
  SerialWorkers w("check lane", 1, 1);
  absl::Notification started, release;
  ASSERT_TRUE(w.Submit(
                   0,
                   [&] {
                     started.Notify();
                     release.WaitForNotificationWithTimeout(kWait);
                   },
                   absl::Now() + kWait)
                  .ok());
  ASSERT_TRUE(started.WaitForNotificationWithTimeout(kWait));
  ASSERT_TRUE(w.Submit(
                   0, [] {}, absl::Now())
                  .ok());  // the queue is full now
  OverlappedKvCheck check(Input(), &w, 0);
  ASSERT_TRUE(check.SetDigests(digests_).ok());
  Land(0, kTokens);
  check.Landed(32);  // refused by the full lane, not waited for
  release.Notify();
  check.Landed(kTokens);
  EXPECT_TRUE(check.Finish(nullptr, 1).ok());
  EXPECT_EQ(check.early_checks(), 0);
}

TEST_F(OverlappedKvCheckTest, WithoutALaneEachRangeIsCheckedInlineAsItLands) {
  OverlappedKvCheck check(Input(), nullptr, 0);
  ASSERT_TRUE(check.SetDigests(digests_).ok());
  Land(0, 32);
  check.Landed(32);
  const absl::Duration after_first = check.check_time();
  EXPECT_GT(after_first, absl::ZeroDuration());  // checked here, before Landed returned
  // A byte of the second range corrupted: caught by the inline check of that range.
  Land(32, kTokens);
  dp_.bytes[0][static_cast<size_t>(dst_blocks_[2]) *
               static_cast<size_t>(RankPoolGeometry(dst_, 0).block_bytes())] ^= std::byte{0x80};
  check.Landed(64);
  EXPECT_GT(check.check_time(), after_first);
  check.Landed(kTokens);
  std::vector<KvDigestMismatch> bad;
  EXPECT_THAT(check.Finish(&bad, 1), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("mismatch")));
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_EQ(bad[0].table_index, 2);
  EXPECT_EQ(check.early_checks(), 0);
}

// The check fused into the copy: each landed range is checked before Landed returns, on the
// pulling thread, from the CRCs the copy computed (the lane stays idle); a source byte that
// changes before its range is copied is caught in that range.
TEST_F(OverlappedKvCheckTest, CrcsFromTheCopyCheckEachRangeBeforeLandedReturns) {
  SerialWorkers w("check lane", 1, 8);
  OverlappedKvCheck check(Input(), &w, 0);
  ASSERT_TRUE(check.SetDigests(digests_).ok());
  LandFused(check, 0, 32);
  EXPECT_EQ(check.early_checks(), 1);  // no Drain: checked here
  EXPECT_GT(check.fused_bytes(), 0);
  // Block 3's first byte on source rank 1 changes before the third range is copied.
  const int64_t at = static_cast<int64_t>(src_blocks_[3]) * RankPoolGeometry(src_, 1).block_bytes();
  sp_.bytes[1][static_cast<size_t>(at)] ^= std::byte{0x02};
  LandFused(check, 32, 64);
  EXPECT_EQ(check.early_checks(), 2);
  LandFused(check, 64, kTokens);
  std::vector<KvDigestMismatch> bad;
  EXPECT_THAT(check.Finish(&bad, 1),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("KV digest mismatch in 1 of")));
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_EQ(bad[0].table_index, 3);
  EXPECT_EQ(bad[0].src_rank, 1);
  EXPECT_EQ(check.early_checks(), 2);
}

// Pipelined ranges cut inside blocks: parts the range plans cut differently from the whole plan
// are read back; everything else comes from the copy; the whole prompt verifies.
TEST_F(OverlappedKvCheckTest, CrcsFromRangesCutInsideBlocksStillVerify) {
  OverlappedKvCheck check(Input(), nullptr, 0);
  LandFused(check, 0, 5);
  LandFused(check, 5, 37);
  ASSERT_TRUE(check.SetDigests(digests_).ok());  // digests last, as a pipelined prefill sends them
  LandFused(check, 37, kTokens);
  EXPECT_TRUE(check.Finish(nullptr, 1).ok());
  EXPECT_GT(check.fused_bytes(), 0);
}

TEST(BlocksPerPullRangeTest, SplitsIntoRangesOfAboutTheAskedBytes) {
  EXPECT_EQ(BlocksPerPullRange(64 << 20, 32, 16 << 20), 8);  // 2 MiB blocks, 16 MiB ranges
  EXPECT_EQ(BlocksPerPullRange(64 << 20, 32, 1), 1);         // at least one block
  EXPECT_EQ(BlocksPerPullRange(64 << 20, 32, 0), 32);        // off: one range
  EXPECT_EQ(BlocksPerPullRange(8 << 20, 4, 16 << 20), 4);    // fits in one range
  EXPECT_EQ(BlocksPerPullRange(64 << 20, 1, 1), 1);          // one block: one range
}

TEST_F(OverlappedKvCheckTest, DestructionWaitsForQueuedChecks) {
  SerialWorkers w("check lane", 1, 8);
  absl::Notification started, release;
  ASSERT_TRUE(w.Submit(
                   0,
                   [&] {
                     started.Notify();
                     release.WaitForNotificationWithTimeout(kWait);
                   },
                   absl::Now() + kWait)
                  .ok());
  ASSERT_TRUE(started.WaitForNotificationWithTimeout(kWait));
  auto check = std::make_unique<OverlappedKvCheck>(Input(), &w, 0);
  ASSERT_TRUE(check->SetDigests(digests_).ok());
  Land(0, 32);
  check->Landed(32);
  ASSERT_EQ(w.pending(0), 2);  // the blocker, and the check behind it
  // The pull failed: the check goes away without Finish. It must not leave its job behind.
  std::thread releaser([&] { release.Notify(); });
  check.reset();
  // Its check sat behind the blocker, so the destructor returned only after the release (and
  // the check, which reads the check's state: a sanitizer build would flag a use after free).
  EXPECT_TRUE(release.HasBeenNotified());
  releaser.join();
  Drain(w);
}

}  // namespace
}  // namespace tandem
