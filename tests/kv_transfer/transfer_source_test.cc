// UcxTransferSource in one process: option validation, the metadata it publishes, borrowed pool
// views, clean shutdown, and that its progress threads serve TCP gets (which UCX emulates with
// messages the source must progress).
#include "kv_transfer/ucx/transfer_source.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kv_transfer/ucx/kv_puller.h"
#include "kv_transfer/ucx/metadata_proto.h"
#include "kv_transfer/ucx/transfer_checks.h"
#include "tests/kv_transfer/status_matchers.h"
#include "tests/kv_transfer/ucx_test_env.h"

namespace tandem::testing {
namespace {

using ::testing::HasSubstr;

UcxTransferSourceOptions Options(Transport transport = Transport::kSharedMemory) {
  UcxTransferSourceOptions o;
  o.engine_id = "prefill-in-process";
  o.epoch = 5;
  o.compat_hash = 77;
  o.layout = KvLayout{ParallelConfig{2, 1, 1, 16, 16}, ModelDims{2, 4, 2, 8}, KvDType::kF32};
  o.pool_bytes_per_rank = 1 << 16;
  o.ucx.config = UcxSettings(transport);
  return o;
}

TEST(TransferSourceTest, RejectsBadOptions) {
  UcxTransferSourceOptions o = Options();
  o.engine_id.clear();
  EXPECT_THAT(UcxTransferSource::Create(o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("engine_id")));
  o = Options();
  o.layout.parallel.tp = 3;  // does not divide 4 query heads
  EXPECT_THAT(UcxTransferSource::Create(o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tp")));
  o = Options();
  o.pool_bytes_per_rank = 0;
  EXPECT_THAT(UcxTransferSource::Create(o), StatusIs(absl::StatusCode::kInvalidArgument,
                                                     HasSubstr("pool_bytes_per_rank must be > 0")));
  o = Options();
  o.ucx.config = {{"RNDV_THRESH", "not-a-size"}};
  EXPECT_THAT(UcxTransferSource::Create(o),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("ucp_config_modify RNDV_THRESH=not-a-size")));
}

TEST(TransferSourceTest, PublishesOneValidEntryPerRank) {
  absl::StatusOr<std::unique_ptr<UcxTransferSource>> source = UcxTransferSource::Create(Options());
  ASSERT_OK(source);
  const TransferMetadata& m = (*source)->metadata();
  EXPECT_EQ(m.engine_id, "prefill-in-process");
  EXPECT_EQ(m.epoch, 5u);
  EXPECT_EQ(m.compat_hash, 77u);
  ASSERT_EQ((*source)->world(), 2);
  ASSERT_EQ(m.ranks.size(), 2u);
  EXPECT_OK(ValidateTransferMetadata(m));
  for (int32_t r = 0; r < 2; ++r) {
    EXPECT_EQ(m.ranks[r].pool_base, reinterpret_cast<uint64_t>((*source)->pool(r).base()));
    EXPECT_EQ(m.ranks[r].pool_bytes, 1 << 16);
    EXPECT_EQ((*source)->pool(r).bytes(), 1 << 16);
  }
  EXPECT_NE(m.ranks[0].worker_address, m.ranks[1].worker_address);
  EXPECT_OK(ParseTransferMetadata(SerializeTransferMetadata(m)));
}

TEST(TransferSourceTest, BorrowedPoolsAreViewsWithChecks) {
  absl::StatusOr<std::unique_ptr<UcxTransferSource>> source = UcxTransferSource::Create(Options());
  ASSERT_OK(source);
  absl::StatusOr<std::unique_ptr<KvPoolMemory>> view = (*source)->BorrowPool(1, 4096);
  ASSERT_OK(view);
  EXPECT_EQ((*view)->base(), (*source)->pool(1).base());
  EXPECT_EQ((*view)->bytes(), 4096);
  EXPECT_THAT((*source)->BorrowPool(2, 16),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank 2 outside [0, 2)")));
  EXPECT_THAT((*source)->BorrowPool(0, (1 << 16) + 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("pool has 65536")));
}

TEST(TransferSourceTest, ShutsDownCleanlyRepeatedly) {
  // Each destruction joins two progress threads blocked on their workers' event fds.
  for (int i = 0; i < 5; ++i) {
    const absl::Time start = absl::Now();
    ASSERT_OK(UcxTransferSource::Create(Options()));
    EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  }
}

TEST(TransferSourceTest, ProgressThreadsServeTcpGets) {
  absl::StatusOr<std::unique_ptr<UcxTransferSource>> source =
      UcxTransferSource::Create(Options(Transport::kTcp));
  ASSERT_OK(source);
  for (int32_t r = 0; r < 2; ++r) {
    auto* bytes = static_cast<unsigned char*>((*source)->pool(r).base());
    for (int i = 0; i < (1 << 16); ++i) bytes[i] = static_cast<unsigned char>(i * 7 + r);
  }
  absl::StatusOr<std::unique_ptr<UcxKvPuller>> puller =
      UcxKvPuller::Create(UcxKvPullerOptions{UcxOptions{UcxSettings(Transport::kTcp)}});
  ASSERT_OK(puller);
  std::vector<std::byte> local(1 << 17);
  // Rank 1's second half, then rank 0's first half, into one local buffer.
  const std::vector<TransferCopy> copies = {{1, 1 << 15, 0, 1 << 15}, {0, 0, 1 << 15, 1 << 15}};
  PullOptions options;
  options.stall_timeout = absl::Seconds(20);
  ASSERT_OK((*puller)->Execute((*source)->metadata(), copies, absl::MakeSpan(local), options));
  EXPECT_EQ(
      std::memcmp(local.data(), static_cast<char*>((*source)->pool(1).base()) + (1 << 15), 1 << 15),
      0);
  EXPECT_EQ(std::memcmp(local.data() + (1 << 15), (*source)->pool(0).base(), 1 << 15), 0);
  EXPECT_EQ((*puller)->cached_connections(), 2);
  (*puller)->Forget("prefill-in-process", 5);
  EXPECT_EQ((*puller)->cached_connections(), 0);
}

}  // namespace
}  // namespace tandem::testing
