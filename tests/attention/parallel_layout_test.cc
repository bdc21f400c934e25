#include "attention/parallel_layout.h"

#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr ModelDims kSynthetic{/*num_layers=*/2, /*num_q_heads=*/8, /*num_kv_heads=*/2,
                               /*head_dim=*/16};
constexpr ModelDims kSmolLm{30, 9, 3, 64};

ParallelConfig Cfg(int32_t tp, int32_t pcp, int32_t dcp, int32_t B = 16, int32_t I = 1) {
  return ParallelConfig{tp, pcp, dcp, B, I};
}

TEST(ParallelLayoutTest, HeadsOfTpRanksWithAndWithoutReplication) {
  // tp=2 <= Hkv=2: each rank one KV head, four query heads.
  RankPlacement p = PlaceRank(Cfg(2, 1, 1), kSynthetic, 1);
  EXPECT_EQ(p.q_head_begin, 4);
  EXPECT_EQ(p.q_head_count, 4);
  EXPECT_EQ(p.kv_head_begin, 1);
  EXPECT_EQ(p.kv_head_count, 1);
  // tp=9 > Hkv=3 on SmolLM2: replicas are consecutive; rank 5 has q head 5, kv head 1.
  p = PlaceRank(Cfg(9, 1, 3), kSmolLm, 5);
  EXPECT_EQ(p.q_head_begin, 5);
  EXPECT_EQ(p.q_head_count, 1);
  EXPECT_EQ(p.kv_head_begin, 1);
  EXPECT_EQ(p.dcp_group, 1);
  EXPECT_EQ(p.dcp_rank, 2);
}

TEST(ParallelLayoutTest, DcpGroupsSpanPcpFirst) {
  // tp=8 (r=4), pcp=2, dcp=4: x = t·2 + c; group 0 = t0c0, t0c1, t1c0, t1c1.
  const ParallelConfig cfg = Cfg(8, 2, 4);
  ASSERT_TRUE(ValidateParallelConfig(cfg, kSynthetic, InstanceRole::kPrefill).ok());
  EXPECT_THAT(DcpGroupRanks(cfg, 0), ElementsAre(0, 8, 1, 9));
  EXPECT_EQ(PlaceRank(cfg, kSynthetic, 9).dcp_rank, 3);
  EXPECT_THAT(TpGroupRanks(cfg, 1), ElementsAre(8, 9, 10, 11, 12, 13, 14, 15));
  EXPECT_THAT(PcpGroupRanks(cfg, 3), ElementsAre(3, 11));
}

// Every valid layout of a grid: groups partition the world, members hold identical KV heads,
// dcp ranks within a group are 0..dcp−1.
TEST(ParallelLayoutTest, ValidLayoutsFormConsistentGroups) {
  int valid = 0;
  for (int32_t tp : {1, 2, 4, 8}) {
    for (int32_t pcp : {1, 2, 3, 4}) {
      for (int32_t dcp = 1; dcp <= tp * pcp; ++dcp) {
        const ParallelConfig cfg = Cfg(tp, pcp, dcp);
        if (!ValidateParallelConfig(cfg, kSynthetic, InstanceRole::kPrefill).ok()) continue;
        ++valid;
        std::set<int32_t> all;
        for (int32_t group = 0; group < cfg.world() / dcp; ++group) {
          const auto ranks = DcpGroupRanks(cfg, group);
          ASSERT_EQ(ranks.size(), static_cast<size_t>(dcp));
          for (int32_t i = 0; i < dcp; ++i) {
            const RankPlacement p = PlaceRank(cfg, kSynthetic, ranks[i]);
            EXPECT_EQ(p.dcp_group, group);
            EXPECT_EQ(p.dcp_rank, i);
            EXPECT_EQ(p.kv_head_begin, PlaceRank(cfg, kSynthetic, ranks[0]).kv_head_begin);
            all.insert(ranks[i]);
          }
        }
        EXPECT_EQ(all.size(), static_cast<size_t>(cfg.world()));
      }
    }
  }
  EXPECT_GT(valid, 20);
}

struct InvalidCase {
  ParallelConfig cfg;
  ModelDims dims;
  InstanceRole role;
  std::string rule;
};

TEST(ParallelLayoutTest, InvalidLayoutsNameTheRule) {
  const InvalidCase cases[] = {
      {Cfg(3, 1, 1), kSynthetic, InstanceRole::kPrefill,
       "tp must divide the number of query heads"},
      {Cfg(2, 1, 1), kSmolLm, InstanceRole::kPrefill, "tp must divide the number of query heads"},
      {Cfg(4, 1, 1), ModelDims{2, 12, 6, 16}, InstanceRole::kPrefill,
       "requires tp to divide num_kv_heads"},
      {Cfg(6, 1, 1), ModelDims{2, 12, 4, 16}, InstanceRole::kPrefill,
       "requires num_kv_heads to divide tp"},
      {Cfg(1, 2, 1), kSynthetic, InstanceRole::kDecode, "pcp must be 1 on a decode instance"},
      {Cfg(2, 1, 2), kSynthetic, InstanceRole::kDecode, "would mix KV heads"},
      {Cfg(8, 1, 3), kSynthetic, InstanceRole::kDecode, "dcp must divide tp*pcp"},
      {Cfg(4, 1, 4), kSynthetic, InstanceRole::kDecode, "would mix KV heads"},
      {Cfg(9, 1, 9), kSmolLm, InstanceRole::kDecode, "would mix KV heads"},
      {Cfg(1, 1, 1, 16, 3), kSynthetic, InstanceRole::kPrefill, "block_size % interleave"},
      {Cfg(0, 1, 1), kSynthetic, InstanceRole::kPrefill, "tp must be >= 1"},
      {Cfg(1, 1, 0), kSynthetic, InstanceRole::kPrefill, "dcp must be >= 1"},
      // Found by fuzz_kv_layout: tp*pcp overflowed int32 in world() (a garbled KvLayout).
      {Cfg(4, 721350632, 1), kSynthetic, InstanceRole::kPrefill,
       "tp*pcp must be at most 65536 ranks (tp=4, pcp=721350632)"},
      {Cfg(8, 8193, 1), kSynthetic, InstanceRole::kPrefill, "tp*pcp must be at most 65536"},
      {Cfg(1, 1, 1, 0, 1), kSynthetic, InstanceRole::kPrefill, "block_size must be >= 1"},
      {Cfg(1, 1, 1), ModelDims{2, 8, 3, 16}, InstanceRole::kPrefill, "must divide num_q_heads"},
  };
  for (const InvalidCase& c : cases) {
    const absl::Status s = ValidateParallelConfig(c.cfg, c.dims, c.role);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.cfg.ToString();
    EXPECT_THAT(s.message(), HasSubstr(c.rule)) << c.cfg.ToString();
  }
}

TEST(ParallelLayoutTest, MixedHeadsMessageListsValidDcp) {
  const absl::Status s = ValidateParallelConfig(Cfg(9, 1, 9), kSmolLm, InstanceRole::kDecode);
  EXPECT_THAT(s.message(), HasSubstr("valid dcp for this layout: {1, 3}"));
  EXPECT_THAT(ValidDcpValues(Cfg(8, 1, 1), kSynthetic), ElementsAre(1, 2, 4));
  EXPECT_THAT(ValidDcpValues(Cfg(2, 2, 1), kSynthetic), ElementsAre(1, 2));
}

}  // namespace
}  // namespace tandem
