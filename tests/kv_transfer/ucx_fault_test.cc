// Faults across a real process boundary: a stopped or killed source, stalls, cancellation,
// corrupted metadata and a mismatched compatibility hash. Every case asserts the exact outcome
// and that the call returns within a bound (never a hang).
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "attention/dcp_layout.h"
#include "gtest/gtest.h"
#include "kv_transfer/gather_plan.h"
#include "kv_transfer/planner.h"
#include "kv_transfer/ucx/kv_puller.h"
#include "kv_transfer/ucx/metadata_proto.h"
#include "kv_transfer/ucx/testing/kv_pattern.h"
#include "kv_transfer/ucx/transfer_checks.h"
#include "tests/kv_transfer/status_matchers.h"
#include "tests/kv_transfer/ucx_test_env.h"

namespace tandem::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr ModelDims kDims{/*num_layers=*/2, /*num_q_heads=*/4, /*num_kv_heads=*/2,
                          /*head_dim=*/64};
constexpr int64_t kTokens = 512;

// One source peer (tp=1) and one destination rank (tp=1) whose block tables share no runs, so
// the plan has one copy per block (32) and several gets are in flight at once. Token-granular:
// the source is DCP 2 with interleave 1 (pcp=2), so the plan is one 256-byte copy per token row
// and the puller gathers them into one segment get per source block (odd block ids: no two
// source blocks are adjacent).
class Transfer {
 public:
  explicit Transfer(Transport transport, bool token_granular = false) : transport_(transport) {
    src_ = KvLayout{ParallelConfig{1, 1, 1, 16, 16}, kDims, KvDType::kF32};
    dst_ = src_;
    if (token_granular) src_.parallel = ParallelConfig{1, 2, 2, 16, 1};
    config_.engine_id = "prefill-faults";
    config_.compat_hash = CompatibilityHash("test-model", src_);
    config_.layout = src_;
    config_.blocks = DescendingOddBlocks(VirtualBlocksFor(src_.parallel.dcp_geometry(), kTokens));
    config_.num_tokens = kTokens;
    dst_blocks_ = StridedBlocks(VirtualBlocksFor(dst_.parallel.dcp_geometry(), kTokens), 2, 0);
  }

  absl::Status Start() {
    absl::StatusOr<std::unique_ptr<SourcePeerProcess>> peer = SpawnPeer(transport_, config_);
    if (!peer.ok()) return peer.status();
    peer_ = *std::move(peer);
    absl::StatusOr<TransferPlan> plan =
        PlanKvTransfer(src_, config_.blocks, dst_, dst_blocks_, kTokens);
    if (!plan.ok()) return plan.status();
    copies_ = plan->copies[0];
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<UcxKvPuller>> NewPuller() const {
    return UcxKvPuller::Create(UcxKvPullerOptions{UcxOptions{UcxSettings(transport_)}});
  }

  std::vector<std::byte> PoisonedPool() const {
    std::vector<std::byte> pool(static_cast<size_t>(PoolBytesForBlocks(dst_, dst_blocks_)));
    PoisonPool(absl::MakeSpan(pool));
    return pool;
  }

  absl::Status Verify(const std::vector<std::byte>& pool) const {
    return VerifyDestinationPool(dst_, 0, dst_blocks_, kTokens, absl::MakeConstSpan(pool));
  }

  SourcePeerProcess& peer() { return *peer_; }
  const TransferMetadata& metadata() const { return peer_->metadata(); }
  const std::vector<TransferCopy>& copies() const { return copies_; }
  const KvLayout& dst() const { return dst_; }

 private:
  Transport transport_;
  KvLayout src_;
  KvLayout dst_;
  SourcePeerConfig config_;
  std::vector<int32_t> dst_blocks_;
  std::vector<TransferCopy> copies_;
  std::unique_ptr<SourcePeerProcess> peer_;
};

PullOptions Options(absl::Duration stall, PullProgress* progress = nullptr,
                    const CancellationToken* cancel = nullptr,
                    std::vector<int32_t>* blamed = nullptr) {
  PullOptions o;
  o.failed_source_ranks = blamed;
  o.max_in_flight = 8;
  o.stall_timeout = stall;
  o.progress = progress;
  o.cancel = cancel;
  return o;
}

// Spins (yielding) until `posted` gets were handed to UCX, at most `limit`. Polls a counter the
// transfer thread publishes; no sleep decides the outcome.
bool AwaitPosted(const PullProgress& progress, int64_t posted, absl::Duration limit) {
  const absl::Time deadline = absl::Now() + limit;
  while (progress.posted.load() < posted) {
    if (absl::Now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

TEST(UcxFaultTest, SharedMemoryGetsCompleteWhileSourceIsStopped) {
  // Pools allocated through UCX are read with plain loads: no help from the source needed.
  Transfer t(Transport::kSharedMemory);
  ASSERT_OK(t.Start());
  ASSERT_OK(t.peer().Signal(SIGSTOP));
  auto puller = t.NewPuller();
  ASSERT_OK(puller);
  std::vector<std::byte> pool = t.PoisonedPool();
  EXPECT_OK((*puller)->Execute(t.metadata(), t.copies(), absl::MakeSpan(pool),
                               Options(absl::Seconds(20))));
  EXPECT_OK(t.Verify(pool));
}

TEST(UcxFaultTest, TcpStallTimesOutNamingTheSourceRankThenRecovers) {
  // Over TCP gets are served by the source's progress thread; a stopped source stalls them.
  Transfer t(Transport::kTcp);
  ASSERT_OK(t.Start());
  auto puller = t.NewPuller();
  ASSERT_OK(puller);
  ASSERT_OK(t.peer().Signal(SIGSTOP));
  std::vector<std::byte> pool = t.PoisonedPool();
  const absl::Duration stall = absl::Milliseconds(300);
  const absl::Time start = absl::Now();
  std::vector<int32_t> blamed;
  EXPECT_THAT((*puller)->Execute(t.metadata(), t.copies(), absl::MakeSpan(pool),
                                 Options(stall, nullptr, nullptr, &blamed)),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("stalled"), HasSubstr("source rank(s) 0"),
                             HasSubstr("engine 'prefill-faults' epoch 1"))));
  EXPECT_LT(absl::Now() - start, stall + RemoteRank::kCloseTimeout + absl::Seconds(2));
  EXPECT_EQ((*puller)->cached_connections(), 0);
  EXPECT_EQ(blamed, std::vector<int32_t>{0});  // reported for eviction (issue 19)

  // The stalled endpoint was dropped; once the source runs again a new pull reconnects.
  ASSERT_OK(t.peer().Signal(SIGCONT));
  std::vector<std::byte> again = t.PoisonedPool();
  EXPECT_OK((*puller)->Execute(t.metadata(), t.copies(), absl::MakeSpan(again),
                               Options(absl::Seconds(20))));
  EXPECT_OK(t.Verify(again));
}

TEST(UcxFaultTest, TcpSourceKilledMidTransferFailsFastWithUnavailable) {
  Transfer t(Transport::kTcp);
  ASSERT_OK(t.Start());
  auto puller = t.NewPuller();
  ASSERT_OK(puller);
  // Stopped first, so the gets are certainly outstanding when the kill lands.
  ASSERT_OK(t.peer().Signal(SIGSTOP));
  std::vector<std::byte> pool = t.PoisonedPool();
  PullProgress progress;
  const absl::Duration stall = absl::Seconds(60);
  absl::Status result;
  std::vector<int32_t> blamed;
  std::thread pull([&] {
    result = (*puller)->Execute(t.metadata(), t.copies(), absl::MakeSpan(pool),
                                Options(stall, &progress, nullptr, &blamed));
  });
  const bool posted = AwaitPosted(progress, 1, absl::Seconds(20));
  const absl::Time killed = absl::Now();
  t.peer().Kill();
  pull.join();
  ASSERT_TRUE(posted);
  EXPECT_EQ(progress.completed.load(), 0);
  EXPECT_THAT(result, StatusIs(absl::StatusCode::kUnavailable, HasSubstr("source rank 0")));
  EXPECT_LT(absl::Now() - killed, absl::Seconds(10));  // detected, not timed out (60 s)
  EXPECT_EQ((*puller)->cached_connections(), 0);
  EXPECT_EQ(blamed, std::vector<int32_t>{0});
}

TEST(UcxFaultTest, TcpSourceKilledBeforeConnectFailsWithUnavailable) {
  Transfer t(Transport::kTcp);
  ASSERT_OK(t.Start());
  t.peer().Kill();
  auto puller = t.NewPuller();
  ASSERT_OK(puller);
  std::vector<std::byte> pool = t.PoisonedPool();
  const absl::Time start = absl::Now();
  std::vector<int32_t> blamed;
  EXPECT_THAT((*puller)->Execute(t.metadata(), t.copies(), absl::MakeSpan(pool),
                                 Options(absl::Seconds(60), nullptr, nullptr, &blamed)),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("source rank 0")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ((*puller)->cached_connections(), 0);
  EXPECT_EQ(blamed, std::vector<int32_t>{0});
}

TEST(UcxFaultTest, SharedMemorySourceKilledAfterConnectStillReadsMappedPoolsOnly) {
  // What really happens on one host: a connection made before the source died keeps the pool
  // segment mapped, so pulls through it still complete with the right bytes (the lease check
  // at ReleaseKv is what tells decode the source is gone). A new connection fails fast.
  Transfer t(Transport::kSharedMemory);
  ASSERT_OK(t.Start());
  auto puller = t.NewPuller();
  ASSERT_OK(puller);
  std::vector<std::byte> first = t.PoisonedPool();
  ASSERT_OK((*puller)->Execute(t.metadata(), t.copies(), absl::MakeSpan(first),
                               Options(absl::Seconds(20))));
  t.peer().Kill();

  std::vector<std::byte> cached = t.PoisonedPool();
  EXPECT_OK((*puller)->Execute(t.metadata(), t.copies(), absl::MakeSpan(cached),
                               Options(absl::Seconds(5))));
  EXPECT_OK(t.Verify(cached));

  auto fresh = t.NewPuller();
  ASSERT_OK(fresh);
  std::vector<std::byte> pool = t.PoisonedPool();
  const absl::Time start = absl::Now();
  EXPECT_THAT(
      (*fresh)->Execute(t.metadata(), t.copies(), absl::MakeSpan(pool), Options(absl::Seconds(60))),
      StatusIs(absl::StatusCode::kUnavailable,
               HasSubstr("connecting to source rank 0 of engine 'prefill-faults'")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ((*fresh)->cached_connections(), 0);
}

// One host with UCX's default transports: the pools are mapped (read with memcpy, no get on the
// endpoint) while TCP carries the endpoint's set-up, since TCP can report a failed peer. A puller
// that goes away right after such pulls must not take the source down: UCX 1.13 aborts in the
// source's progress thread when the connection back to a vanished puller fails with the source's
// wireup reply still queued (docs/kv_transfer.md, "A puller's endpoints are wired up before use").
TEST(UcxFaultTest, PullersGoneRightAfterMappedPullsLeaveTheSourceServing) {
  Transfer t(Transport::kSharedMemoryAndTcp);
  ASSERT_OK(t.Start());
  for (int round = 0; round < 4; ++round) {
    SCOPED_TRACE(round);
    auto puller = t.NewPuller();
    ASSERT_OK(puller);
    // Two pulls: the second one's first progress call sends the endpoint's wireup request (the
    // first pull connected after its own), so the source answers a puller about to vanish.
    for (int pull = 0; pull < 2; ++pull) {
      std::vector<std::byte> pool = t.PoisonedPool();
      ASSERT_OK((*puller)->Execute(t.metadata(), t.copies(), absl::MakeSpan(pool),
                                   Options(absl::Seconds(20))));
      EXPECT_OK(t.Verify(pool));
    }
    puller->reset();  // closes its endpoints and destroys its worker at once
  }
  auto last = t.NewPuller();
  ASSERT_OK(last);
  std::vector<std::byte> pool = t.PoisonedPool();
  EXPECT_OK(
      (*last)->Execute(t.metadata(), t.copies(), absl::MakeSpan(pool), Options(absl::Seconds(20))));
  EXPECT_OK(t.Verify(pool));
  last->reset();
  absl::StatusOr<int> exit = t.peer().Shutdown(absl::Seconds(20));
  ASSERT_OK(exit);
  EXPECT_TRUE(WIFEXITED(*exit) && WEXITSTATUS(*exit) == 0)
      << "the source died: " << (WIFSIGNALED(*exit) ? strsignal(WTERMSIG(*exit)) : "exit code")
      << " " << (WIFEXITED(*exit) ? WEXITSTATUS(*exit) : WTERMSIG(*exit));
}

TEST(UcxFaultTest, CancelledBeforeStartPostsNothing) {
  Transfer t(Transport::kSharedMemory);
  ASSERT_OK(t.Start());
  auto puller = t.NewPuller();
  ASSERT_OK(puller);
  std::vector<std::byte> pool = t.PoisonedPool();
  CancellationToken cancel;
  cancel.Cancel();
  PullProgress progress;
  EXPECT_THAT((*puller)->Execute(t.metadata(), t.copies(), absl::MakeSpan(pool),
                                 Options(absl::Seconds(20), &progress, &cancel)),
              StatusIs(absl::StatusCode::kCancelled, HasSubstr("after 0 of 32 copies")));
  EXPECT_EQ(progress.posted.load(), 0);
  EXPECT_TRUE(std::all_of(pool.begin(), pool.end(), [](std::byte b) { return b == kPoison; }));
}

TEST(UcxFaultTest, CancelMidTransferReturnsPromptlyDropsConnectionsAndAllowsRetry) {
  Transfer t(Transport::kTcp);
  ASSERT_OK(t.Start());
  auto puller = t.NewPuller();
  ASSERT_OK(puller);
  ASSERT_OK(t.peer().Signal(SIGSTOP));  // gets stay outstanding until cancelled
  std::vector<std::byte> pool = t.PoisonedPool();
  CancellationToken cancel;
  PullProgress progress;
  absl::Status result;
  std::vector<int32_t> blamed;
  std::thread pull([&] {
    result = (*puller)->Execute(t.metadata(), t.copies(), absl::MakeSpan(pool),
                                Options(absl::Seconds(60), &progress, &cancel, &blamed));
  });
  const bool posted = AwaitPosted(progress, 8, absl::Seconds(20));  // a full window
  const absl::Time cancelled = absl::Now();
  cancel.Cancel();
  pull.join();
  ASSERT_TRUE(posted);
  EXPECT_THAT(result, StatusIs(absl::StatusCode::kCancelled, HasSubstr("cancelled after 0 of 32")));
  EXPECT_LT(absl::Now() - cancelled, RemoteRank::kCloseTimeout + absl::Seconds(2));
  EXPECT_EQ(progress.posted.load(), 8);  // nothing posted past the window after the cancel
  EXPECT_TRUE(blamed.empty());           // our own cancel blames no peer
  EXPECT_EQ((*puller)->cached_connections(), 0);

  ASSERT_OK(t.peer().Signal(SIGCONT));
  std::vector<std::byte> again = t.PoisonedPool();
  EXPECT_OK((*puller)->Execute(t.metadata(), t.copies(), absl::MakeSpan(again),
                               Options(absl::Seconds(20))));
  EXPECT_OK(t.Verify(again));
}

TEST(UcxFaultTest, TcpGatheredSegmentGetsStallAndCancelLikeSingleGets) {
  Transfer t(Transport::kTcp, /*token_granular=*/true);
  ASSERT_OK(t.Start());
  const GatherPlan gather = PlanGather(t.copies(), GatherOptions{}, [](int32_t) { return true; });
  ASSERT_GE(gather.segments.size(), 16u);  // the pull is gathered, in many segments
  ASSERT_TRUE(gather.direct.empty());
  auto puller = t.NewPuller();
  ASSERT_OK(puller);

  // A stopped source stalls the segment gets: both ranks are owed data and blamed.
  ASSERT_OK(t.peer().Signal(SIGSTOP));
  std::vector<std::byte> pool = t.PoisonedPool();
  std::vector<int32_t> blamed;
  const absl::Time start = absl::Now();
  EXPECT_THAT((*puller)->Execute(t.metadata(), t.copies(), absl::MakeSpan(pool),
                                 Options(absl::Milliseconds(300), nullptr, nullptr, &blamed)),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("stalled"), HasSubstr("source rank(s) 0,1"),
                             // new endpoints: their set-up cannot finish either
                             HasSubstr("and 2 connection set-up(s) outstanding"))));
  EXPECT_LT(absl::Now() - start,
            absl::Milliseconds(300) + RemoteRank::kCloseTimeout + absl::Seconds(2));
  EXPECT_EQ(blamed, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ((*puller)->cached_connections(), 0);

  // Cancelled with a full window of segment gets outstanding: posting stops at the window
  // (8 segments' copies), nothing is blamed, and the puller works again afterwards.
  CancellationToken cancel;
  PullProgress progress;
  absl::Status result;
  std::thread pull([&] {
    result = (*puller)->Execute(t.metadata(), t.copies(), absl::MakeSpan(pool),
                                Options(absl::Seconds(60), &progress, &cancel, &blamed));
  });
  int64_t window_copies = 0;
  for (size_t s = 0; s < 8; ++s) window_copies += gather.segments[s].copies;
  const bool posted = AwaitPosted(progress, window_copies, absl::Seconds(20));
  cancel.Cancel();
  pull.join();
  ASSERT_TRUE(posted);
  EXPECT_THAT(result, StatusIs(absl::StatusCode::kCancelled, HasSubstr("cancelled after 0 of")));
  EXPECT_EQ(progress.posted.load(), window_copies);
  EXPECT_EQ(blamed, (std::vector<int32_t>{0, 1}));  // unchanged by the cancel

  ASSERT_OK(t.peer().Signal(SIGCONT));
  std::vector<std::byte> again = t.PoisonedPool();
  EXPECT_OK((*puller)->Execute(t.metadata(), t.copies(), absl::MakeSpan(again),
                               Options(absl::Seconds(20))));
  EXPECT_OK(t.Verify(again));
}

TEST(UcxFaultTest, MismatchedCompatibilityHashIsRejectedAtHandshake) {
  Transfer t(Transport::kSharedMemory);
  ASSERT_OK(t.Start());
  KvLayout other = t.dst();
  other.dtype = KvDType::kBF16;  // the decode side stores a different KV dtype
  EXPECT_THAT(CheckHandshake(CompatibilityHash("test-model", other), t.metadata()),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("incompatible KV source"),
                             HasSubstr("engine 'prefill-faults' epoch 1"))));
  EXPECT_THAT(CheckHandshake(CompatibilityHash("another-model", t.dst()), t.metadata()),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("compatibility hash")));
  EXPECT_OK(CheckHandshake(CompatibilityHash("test-model", t.dst()), t.metadata()));
}

TEST(UcxFaultTest, CorruptedRkeyOnTheWireIsRejectedBeforeUcx) {
  Transfer t(Transport::kSharedMemory);
  ASSERT_OK(t.Start());
  v1::TransferMetadata proto;
  ASSERT_TRUE(proto.ParseFromString(t.peer().serialized_metadata()));
  std::string* rkey = proto.mutable_ranks(0)->mutable_rkey();
  (*rkey)[rkey->size() / 2] ^= 0x5a;
  EXPECT_THAT(ParseTransferMetadata(proto.SerializeAsString()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ranks[0].checksum")));
  EXPECT_THAT(ParseTransferMetadata("\x0a\xff\xff garbage"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("not a serialized tandem.v1.TransferMetadata")));
}

TEST(UcxFaultTest, TruncatedRkeyOrWorkerAddressGetsSpecificErrors) {
  Transfer t(Transport::kSharedMemory);
  ASSERT_OK(t.Start());
  const RankTransferInfo& good = t.metadata().ranks[0];
  for (size_t keep : {size_t{1}, size_t{9}, size_t{12}, good.rkey.size() - 1}) {
    SCOPED_TRACE(::testing::Message() << "rkey bytes kept: " << keep);
    TransferMetadata m = t.metadata();
    m.ranks[0].rkey.resize(keep);
    auto puller = t.NewPuller();
    ASSERT_OK(puller);
    std::vector<std::byte> pool = t.PoisonedPool();
    EXPECT_THAT((*puller)->Execute(m, t.copies(), absl::MakeSpan(pool), Options(absl::Seconds(5))),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr("ranks[0].rkey"), HasSubstr("truncated"))));
  }
  TransferMetadata empty = t.metadata();
  empty.ranks[0].rkey.clear();
  auto puller = t.NewPuller();
  ASSERT_OK(puller);
  std::vector<std::byte> pool = t.PoisonedPool();
  EXPECT_THAT(
      (*puller)->Execute(empty, t.copies(), absl::MakeSpan(pool), Options(absl::Seconds(5))),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ranks[0].rkey is empty")));
  // UCX checks worker addresses itself (our copy is zero-padded, so it never reads past it).
  for (size_t keep : {size_t{1}, size_t{20}, good.worker_address.size() / 2}) {
    SCOPED_TRACE(::testing::Message() << "address bytes kept: " << keep);
    TransferMetadata m = t.metadata();
    m.ranks[0].worker_address.resize(keep);
    EXPECT_THAT((*puller)->Execute(m, t.copies(), absl::MakeSpan(pool), Options(absl::Seconds(5))),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("connecting to source rank 0 of engine 'prefill-faults'")));
  }
  EXPECT_EQ((*puller)->cached_connections(), 0);
}

TEST(UcxFaultTest, OutOfBoundsCopiesAndBadOptionsAreRejectedBeforePosting) {
  Transfer t(Transport::kSharedMemory);
  ASSERT_OK(t.Start());
  auto puller = t.NewPuller();
  ASSERT_OK(puller);
  std::vector<std::byte> pool = t.PoisonedPool();
  PullProgress progress;
  const int64_t remote_bytes = t.metadata().ranks[0].pool_bytes;
  std::vector<TransferCopy> copies = t.copies();
  copies.push_back(TransferCopy{0, remote_bytes - 8, 0, 16});
  EXPECT_THAT((*puller)->Execute(t.metadata(), copies, absl::MakeSpan(pool),
                                 Options(absl::Seconds(5), &progress)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("copy 32"), HasSubstr("source rank 0's pool"))));
  copies.back() = TransferCopy{0, 0, static_cast<int64_t>(pool.size()) - 4, 16};
  EXPECT_THAT((*puller)->Execute(t.metadata(), copies, absl::MakeSpan(pool),
                                 Options(absl::Seconds(5), &progress)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("copy 32"), HasSubstr("local pool"))));
  copies.back() = TransferCopy{1, 0, 0, 16};
  EXPECT_THAT((*puller)->Execute(t.metadata(), copies, absl::MakeSpan(pool),
                                 Options(absl::Seconds(5), &progress)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("source rank 1 outside")));
  PullOptions no_window = Options(absl::Seconds(5), &progress);
  no_window.max_in_flight = 0;
  EXPECT_THAT((*puller)->Execute(t.metadata(), t.copies(), absl::MakeSpan(pool), no_window),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("max_in_flight")));
  TransferMetadata extra_rank = t.metadata();
  extra_rank.ranks.push_back(extra_rank.ranks[0]);
  EXPECT_THAT((*puller)->Execute(extra_rank, t.copies(), absl::MakeSpan(pool),
                                 Options(absl::Seconds(5), &progress)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ranks has 2 entries")));
  EXPECT_EQ(progress.posted.load(), 0);
  EXPECT_EQ((*puller)->cached_connections(), 0);
}

}  // namespace
}  // namespace tandem::testing
