// KvLayout's field-by-field comparison and per-rank pool geometry (kv/kv_layout.h).
#include "kv/kv_layout.h"

#include "gtest/gtest.h"

namespace tandem {
namespace {

KvLayout Layout() {
  return KvLayout{ParallelConfig{2, 1, 2, 16, 1}, ModelDims{30, 9, 3, 64}, KvDType::kF16};
}

TEST(KvLayoutTest, EqualOnlyWhenEveryFieldIs) {
  EXPECT_EQ(Layout(), Layout());
  // Each field on its own makes two layouts differ.
  const auto differs = [](auto change) {
    KvLayout other = Layout();
    change(other);
    return !(other == Layout()) && other != Layout();
  };
  EXPECT_TRUE(differs([](KvLayout& l) { l.parallel.tp = 1; }));
  EXPECT_TRUE(differs([](KvLayout& l) { l.parallel.pcp = 2; }));
  EXPECT_TRUE(differs([](KvLayout& l) { l.parallel.dcp = 1; }));
  EXPECT_TRUE(differs([](KvLayout& l) { l.parallel.block_size = 32; }));
  EXPECT_TRUE(differs([](KvLayout& l) { l.parallel.interleave = 2; }));
  EXPECT_TRUE(differs([](KvLayout& l) { l.dims.num_layers = 31; }));
  EXPECT_TRUE(differs([](KvLayout& l) { l.dims.num_q_heads = 3; }));
  EXPECT_TRUE(differs([](KvLayout& l) { l.dims.num_kv_heads = 1; }));
  EXPECT_TRUE(differs([](KvLayout& l) { l.dims.head_dim = 32; }));
  EXPECT_TRUE(differs([](KvLayout& l) { l.dtype = KvDType::kF32; }));
}

TEST(KvLayoutTest, RankPoolGeometryHoldsTheRanksKvHeads) {
  // tp = 3 over 3 KV heads: one head a rank.
  KvLayout layout = Layout();
  layout.parallel = ParallelConfig{3, 1, 1, 16, 1};
  for (int32_t rank = 0; rank < 3; ++rank) {
    const PoolGeometry g = RankPoolGeometry(layout, rank);
    EXPECT_EQ(g.num_kv_heads, 1) << rank;
    EXPECT_EQ(g.num_layers, 30);
    EXPECT_EQ(g.block_size, 16);
    EXPECT_EQ(g.head_dim, 64);
    EXPECT_EQ(g.dtype, KvDType::kF16);
  }
}

}  // namespace
}  // namespace tandem
