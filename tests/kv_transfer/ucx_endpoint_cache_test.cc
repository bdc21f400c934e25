// The UCX puller's endpoint cache (issue 19): a cached endpoint that failed is evicted and the
// pull is retried once on a fresh endpoint before the error is returned, with the source rank
// blamed once. Real UCX over loopback TCP against a source peer process.
#include <signal.h>

#include <string>
#include <vector>

#include "attention/dcp_layout.h"
#include "gtest/gtest.h"
#include "kv_transfer/planner.h"
#include "kv_transfer/ucx/kv_puller.h"
#include "kv_transfer/ucx/testing/kv_pattern.h"
#include "kv_transfer/ucx/transfer_checks.h"
#include "tests/kv_transfer/status_matchers.h"
#include "tests/kv_transfer/ucx_test_env.h"

namespace tandem::testing {
namespace {

using ::testing::AllOf;
using ::testing::AnyOf;
using ::testing::HasSubstr;

constexpr ModelDims kDims{/*num_layers=*/2, /*num_q_heads=*/4, /*num_kv_heads=*/2,
                          /*head_dim=*/64};
constexpr int64_t kTokens = 256;

class EndpointCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    layout_ = KvLayout{ParallelConfig{1, 1, 1, 16, 16}, kDims, KvDType::kF32};
    const int64_t used = VirtualBlocksFor(layout_.parallel.dcp_geometry(), kTokens);
    SourcePeerConfig config;
    config.engine_id = "prefill-endpoints";
    config.compat_hash = CompatibilityHash("test-model", layout_);
    config.layout = layout_;
    config.blocks = DescendingOddBlocks(used);
    config.num_tokens = kTokens;
    dst_blocks_ = StridedBlocks(used, 2, 0);
    absl::StatusOr<std::unique_ptr<SourcePeerProcess>> peer = SpawnPeer(Transport::kTcp, config);
    ASSERT_TRUE(peer.ok()) << peer.status();
    peer_ = *std::move(peer);
    absl::StatusOr<TransferPlan> plan =
        PlanKvTransfer(layout_, config.blocks, layout_, dst_blocks_, kTokens);
    ASSERT_TRUE(plan.ok()) << plan.status();
    copies_ = plan->copies[0];
    absl::StatusOr<std::unique_ptr<UcxKvPuller>> puller =
        UcxKvPuller::Create(UcxKvPullerOptions{UcxOptions{UcxSettings(Transport::kTcp)}});
    ASSERT_TRUE(puller.ok()) << puller.status();
    puller_ = *std::move(puller);
  }

  absl::Status Pull(std::vector<int32_t>* blamed) {
    pool_.assign(static_cast<size_t>(PoolBytesForBlocks(layout_, dst_blocks_)), std::byte{0});
    PoisonPool(absl::MakeSpan(pool_));
    PullOptions o;
    o.failed_source_ranks = blamed;
    o.max_in_flight = 8;
    o.stall_timeout = absl::Seconds(60);
    return puller_->Execute(peer_->metadata(), copies_, absl::MakeSpan(pool_), o);
  }

  KvLayout layout_;
  std::vector<int32_t> dst_blocks_;
  std::vector<TransferCopy> copies_;
  std::vector<std::byte> pool_;
  std::unique_ptr<SourcePeerProcess> peer_;
  std::unique_ptr<UcxKvPuller> puller_;
};

TEST_F(EndpointCacheTest, HealthyEndpointIsReusedAcrossPulls) {
  ASSERT_OK(Pull(nullptr));
  ASSERT_OK(VerifyDestinationPool(layout_, 0, dst_blocks_, kTokens, absl::MakeConstSpan(pool_)));
  EXPECT_EQ(puller_->cached_connections(), 1);
  ASSERT_OK(Pull(nullptr));
  ASSERT_OK(VerifyDestinationPool(layout_, 0, dst_blocks_, kTokens, absl::MakeConstSpan(pool_)));
  EXPECT_EQ(puller_->cached_connections(), 1);
}

// The source dies while the puller holds a cached endpoint to it (no traffic meanwhile): the
// failed endpoint is never used again. Either UCX's peer-error callback (delivered by the
// progress call at the start of the next pull) evicts it eagerly and the pull connects afresh,
// or a get on it fails, it is evicted, and the pull is retried exactly once on a fresh endpoint.
// Either way the pull fails naming the source, blaming rank 0 once, leaving nothing cached,
// within a bound (detected, not the 60 s stall timeout).
TEST_F(EndpointCacheTest, FailedCachedEndpointIsEvictedAndNeverReused) {
  ASSERT_OK(Pull(nullptr));
  ASSERT_EQ(puller_->cached_connections(), 1);
  peer_->Kill();
  std::vector<int32_t> blamed;
  const absl::Time start = absl::Now();
  const absl::Status second = Pull(&blamed);
  EXPECT_THAT(second, StatusIs(absl::StatusCode::kUnavailable,
                               AllOf(HasSubstr("source rank 0 of engine 'prefill-endpoints'"),
                                     AnyOf(HasSubstr("connecting to source rank 0"),
                                           HasSubstr("retried on fresh endpoints after: ")))));
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  EXPECT_EQ(puller_->cached_connections(), 0);
  EXPECT_EQ(blamed, std::vector<int32_t>{0});
  // A fresh endpoint to a dead source fails without another retry.
  blamed.clear();
  const absl::Status third = Pull(&blamed);
  EXPECT_THAT(third, StatusIs(absl::StatusCode::kUnavailable, HasSubstr("source rank 0")));
  EXPECT_EQ(std::string(third.message()).find("retried"), std::string::npos) << third;
  EXPECT_EQ(puller_->cached_connections(), 0);
}

}  // namespace
}  // namespace tandem::testing
