#include "attention/dcp_layout.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(DcpLayoutTest, LocalLenWorkedValuesFromDesign) {
  auto lens = [](int64_t S, int32_t N, int32_t I) {
    std::vector<int64_t> out;
    for (int32_t r = 0; r < N; ++r) out.push_back(LocalLen(S, N, r, I));
    return out;
  };
  EXPECT_THAT(lens(10, 4, 1), ElementsAre(3, 3, 2, 2));
  EXPECT_THAT(lens(10, 4, 2), ElementsAre(4, 2, 2, 2));
  EXPECT_THAT(lens(17, 2, 4), ElementsAre(9, 8));
  EXPECT_THAT(lens(1, 4, 16), ElementsAre(1, 0, 0, 0));
}

TEST(DcpLayoutTest, SlotMapWorkedExampleFromDesign) {
  const DcpGeometry g{/*block_size=*/4, /*dcp=*/2, /*interleave=*/2};
  const int32_t table[] = {10, 20, 30};
  std::vector<int64_t> slots;
  for (int64_t pos = 0; pos < 10; ++pos) slots.push_back(SlotOf(g, 0, pos, table));
  EXPECT_THAT(slots, ElementsAre(40, 41, -1, -1, 42, 43, -1, -1, 80, 81));
}

// Brute force over many geometries: every position has exactly one owner, local offsets of an
// owner are dense and increasing, LocalLen matches a count, GlobalPosition inverts LocalIndex.
TEST(DcpLayoutTest, OwnershipPropertiesHoldOverGrid) {
  for (int32_t B : {1, 2, 4, 6, 16}) {
    for (int32_t N : {1, 2, 3, 4, 8}) {
      for (int32_t I = 1; I <= B; ++I) {
        if (B % I != 0) continue;
        const DcpGeometry g{B, N, I};
        ASSERT_TRUE(ValidateDcpGeometry(g).ok());
        const int64_t max_pos = 3 * VirtualBlockTokens(g) + 5;
        std::vector<int64_t> count(N, 0);
        for (int64_t pos = 0; pos < max_pos; ++pos) {
          const int32_t owner = OwnerRank(g, pos);
          ASSERT_GE(owner, 0);
          ASSERT_LT(owner, N);
          // Dense, in position order: this token is the owner's count[owner]-th.
          ASSERT_EQ(LocalIndex(g, pos), count[owner]) << "B=" << B << " N=" << N << " I=" << I;
          ASSERT_EQ(GlobalPosition(g, owner, count[owner]), pos);
          const int32_t local = LocalOffset(g, pos);
          ASSERT_GE(local, 0);
          ASSERT_LT(local, B);
          ++count[owner];
          for (int32_t r = 0; r < N; ++r) {
            ASSERT_EQ(LocalLen(g, r, pos + 1), count[r]) << "S=" << pos + 1 << " R=" << r;
          }
        }
      }
    }
  }
}

TEST(DcpLayoutTest, SlotOfLocalMatchesSlotOf) {
  const DcpGeometry g{4, 3, 2};
  const int32_t table[] = {7, 3, 11, 0};
  for (int64_t pos = 0; pos < 4 * VirtualBlockTokens(g); ++pos) {
    const int32_t owner = OwnerRank(g, pos);
    EXPECT_EQ(SlotOf(g, owner, pos, table), SlotOfLocal(g, LocalIndex(g, pos), table));
    for (int32_t r = 0; r < g.dcp; ++r) {
      if (r != owner) {
        EXPECT_EQ(SlotOf(g, r, pos, table), -1);
      }
    }
  }
}

TEST(DcpLayoutTest, ValidateRejectsBlockSizeNotMultipleOfInterleave) {
  const absl::Status s = ValidateDcpGeometry(DcpGeometry{16, 2, 3});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("block_size % interleave"));
  EXPECT_EQ(ValidateDcpGeometry(DcpGeometry{0, 2, 1}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateDcpGeometry(DcpGeometry{4, 0, 1}).code(), absl::StatusCode::kInvalidArgument);
}

TEST(DcpLayoutTest, BatchSlotMappingUsesEachRequestsTable) {
  const DcpGeometry g{4, 2, 1};
  const std::vector<int32_t> ids = {5, 6, /*request 1:*/ 9};
  const std::vector<int64_t> offsets = {0, 2, 3};
  const BlockTablesView tables{ids.data(), offsets.data(), 2};
  const std::vector<int64_t> positions = {0, 1, 8, 3, 2};
  const std::vector<int32_t> requests = {0, 0, 0, 1, 1};
  std::vector<int64_t> slots(positions.size());
  ASSERT_TRUE(ComputeSlotMapping(g, 1, positions, requests, tables, absl::MakeSpan(slots)).ok());
  // Rank 1 owns odd positions (I=1, N=2): pos 1 → local 0 of block 5; pos 3 → local 1 of block 9.
  EXPECT_THAT(slots, ElementsAre(-1, 20, -1, 37, -1));
}

TEST(DcpLayoutTest, BatchSlotMappingRejectsBadInput) {
  const DcpGeometry g{4, 2, 1};
  const std::vector<int32_t> ids = {5};
  const std::vector<int64_t> offsets = {0, 1};
  const BlockTablesView tables{ids.data(), offsets.data(), 1};
  std::vector<int64_t> slots(1);
  const std::vector<int32_t> req0 = {0};
  const std::vector<int32_t> req_bad = {1};
  const std::vector<int64_t> too_far = {8};
  const std::vector<int64_t> ok_pos = {1};
  EXPECT_THAT(ComputeSlotMapping(g, 0, too_far, req0, tables, absl::MakeSpan(slots)).message(),
              HasSubstr("needs virtual block 1"));
  EXPECT_THAT(ComputeSlotMapping(g, 0, ok_pos, req_bad, tables, absl::MakeSpan(slots)).message(),
              HasSubstr("request index 1"));
  EXPECT_EQ(ComputeSlotMapping(g, 2, ok_pos, req0, tables, absl::MakeSpan(slots)).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem
