// Domain types of the transfer layer: compatibility hash, per-rank pool geometry.
#include "kv_transfer/transfer_types.h"

#include <string>

#include "common/fnv1a.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

KvLayout Layout(int32_t tp, int32_t pcp, int32_t dcp, int32_t B, int32_t I) {
  return KvLayout{ParallelConfig{tp, pcp, dcp, B, I}, ModelDims{30, 9, 3, 64}, KvDType::kF32};
}

TEST(Fnv1aTest, PublishedTestVectors) {
  static_assert(Fnv1a64("") == 0xcbf29ce484222325ull);
  EXPECT_EQ(Fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(Fnv1a64("foobar"), 0x85944171f73967e8ull);
  // Continuing a hash equals hashing the concatenation.
  EXPECT_EQ(Fnv1a64("bar", Fnv1a64("foo")), Fnv1a64("foobar"));
}

TEST(CompatibilityHashTest, IsFnv1aOfTheCanonicalLittleEndianEncoding) {
  // The encoding, spelled out byte by byte: tag, protocol version (u32), identity length (u64),
  // identity, num_layers, head_dim, num_kv_heads (u32 each), dtype (u8).
  const std::string identity = "smollm2-135m-q4_1";
  std::string enc = "tandem-kv";
  enc += std::string("\x01\0\0\0", 4);
  enc += std::string("\x11\0\0\0\0\0\0\0", 8);  // 17 bytes of identity
  enc += identity;
  enc += std::string(
      "\x1e\0\0\0"
      "\x40\0\0\0"
      "\x03\0\0\0"
      "\0",
      13);
  ASSERT_EQ(kKvProtocolVersion, 1u);
  const uint64_t h = CompatibilityHash(identity, Layout(3, 1, 3, 16, 1));
  EXPECT_EQ(h, Fnv1a64(enc));
  // Peers compare this value at handshake, so it is pinned: the same in every process, build and
  // machine. If the encoding changes on purpose, bump kKvProtocolVersion and re-pin.
  EXPECT_EQ(h, 10658936155435984442ull);
}

TEST(CompatibilityHashTest, EqualWhenOnlyParallelLayoutDiffers) {
  const uint64_t h = CompatibilityHash("m", Layout(3, 1, 1, 16, 1));
  EXPECT_EQ(CompatibilityHash("m", Layout(1, 1, 1, 16, 1)), h);
  EXPECT_EQ(CompatibilityHash("m", Layout(3, 2, 2, 16, 1)), h);
  EXPECT_EQ(CompatibilityHash("m", Layout(3, 1, 3, 8, 4)), h);
}

TEST(CompatibilityHashTest, DiffersWhenAnyHashedFieldDiffers) {
  const KvLayout base = Layout(1, 1, 1, 16, 1);
  const uint64_t h = CompatibilityHash("m", base);
  EXPECT_NE(CompatibilityHash("n", base), h);
  EXPECT_NE(CompatibilityHash("", base), h);
  KvLayout l = base;
  l.dims.num_layers = 31;
  EXPECT_NE(CompatibilityHash("m", l), h);
  l = base;
  l.dims.head_dim = 128;
  EXPECT_NE(CompatibilityHash("m", l), h);
  l = base;
  l.dims.num_kv_heads = 9;
  EXPECT_NE(CompatibilityHash("m", l), h);
  l = base;
  l.dtype = KvDType::kF16;
  const uint64_t f16 = CompatibilityHash("m", l);
  EXPECT_NE(f16, h);
  l.dtype = KvDType::kBF16;
  EXPECT_NE(CompatibilityHash("m", l), h);
  EXPECT_NE(CompatibilityHash("m", l), f16);
}

TEST(RankPoolGeometryTest, HeadsOfTheRankAndLayoutBlockShape) {
  // SmolLM2 dims: 3 KV heads. tp3: one head per rank; tp1: all three.
  KvLayout l = Layout(3, 1, 1, 16, 1);
  l.dtype = KvDType::kBF16;
  const PoolGeometry g = RankPoolGeometry(l, 2);
  EXPECT_EQ(g.num_kv_heads, 1);
  EXPECT_EQ(g.num_layers, 30);
  EXPECT_EQ(g.block_size, 16);
  EXPECT_EQ(g.head_dim, 64);
  EXPECT_EQ(g.dtype, KvDType::kBF16);
  EXPECT_EQ(g.block_bytes(), 30 * 2 * 16 * 64 * 2);
  EXPECT_EQ(RankPoolGeometry(Layout(1, 1, 1, 8, 8), 0).num_kv_heads, 3);
  // pcp rank 1 of tp3 pcp2 holds the same heads as its TP peer.
  EXPECT_EQ(RankPoolGeometry(Layout(3, 2, 1, 16, 1), 4).num_kv_heads, 1);
}

}  // namespace
}  // namespace tandem
