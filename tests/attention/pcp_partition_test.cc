#include "attention/pcp_partition.h"

#include <numeric>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

using ::testing::ElementsAre;

TEST(PcpPartitionTest, TwoRanksGetMirroredChunks) {
  // q=10, pcp=2: 4 chunks of 3 → [0,3) [3,6) [6,9) [9,10); rank 0: chunks 0,3; rank 1: 1,2.
  const std::vector<int64_t> lengths = {10};
  const PcpPartition p = PartitionForPcp(lengths, 2);
  EXPECT_THAT(p.gather[0], ElementsAre(0, 1, 2, 9));
  EXPECT_THAT(p.gather[1], ElementsAre(3, 4, 5, 6, 7, 8));
}

TEST(PcpPartitionTest, EmptyChunksAreDropped) {
  const std::vector<int64_t> lengths = {1, 0, 2};
  const PcpPartition p = PartitionForPcp(lengths, 4);
  // Chunk size 1: request 0 → chunk 0 only (rank 0); request 2 (rows 1,2) → chunks 0,1.
  EXPECT_THAT(p.gather[0], ElementsAre(0, 1));
  EXPECT_THAT(p.gather[1], ElementsAre(2));
  EXPECT_TRUE(p.gather[2].empty());
  EXPECT_TRUE(p.gather[3].empty());
}

// For q in 1..200 and pcp in 1..8 (single and batched), the ranks' rows cover the prompt exactly
// once and restore ∘ gather is the identity, for a padded stride too.
TEST(PcpPartitionTest, GatherThenRestoreIsIdentity) {
  for (int32_t pcp = 1; pcp <= 8; ++pcp) {
    for (int64_t q = 1; q <= 200; ++q) {
      for (const std::vector<int64_t>& lengths :
           {std::vector<int64_t>{q}, std::vector<int64_t>{q, (q * 7) % 13, 3}}) {
        const PcpPartition p = PartitionForPcp(lengths, pcp);
        const int64_t total = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
        std::vector<int> seen(total, 0);
        for (const auto& rows : p.gather) {
          for (int64_t r : rows) ++seen[r];
        }
        for (int64_t i = 0; i < total; ++i) ASSERT_EQ(seen[i], 1) << "q=" << q << " pcp=" << pcp;
        for (int64_t stride : {p.max_rows_per_rank(), p.max_rows_per_rank() + 3}) {
          std::vector<int64_t> concat(pcp * stride, -1);
          for (int32_t c = 0; c < pcp; ++c) {
            for (size_t i = 0; i < p.gather[c].size(); ++i) concat[c * stride + i] = p.gather[c][i];
          }
          const std::vector<int64_t> restore = p.RestoreIndex(stride);
          for (int64_t i = 0; i < total; ++i) ASSERT_EQ(concat[restore[i]], i);
        }
      }
    }
  }
}

TEST(PcpPartitionTest, ChunkSizesBalanceWork) {
  // q=16, pcp=4: 8 chunks of 2; every rank computes exactly 4 tokens.
  const std::vector<int64_t> lengths = {16};
  const PcpPartition p = PartitionForPcp(lengths, 4);
  for (const auto& rows : p.gather) EXPECT_EQ(rows.size(), 4u);
  EXPECT_THAT(p.gather[1], ElementsAre(2, 3, 12, 13));
}

}  // namespace
}  // namespace tandem
