// KV digests (kv_transfer/kv_digest.h, crc32c.h): the CRC against its standard check value and
// the portable table; digests computed on a source and verified on a destination over layout
// pairs with different TP, PCP, DCP, block size and interleave (replicas on either side), for
// prompt lengths that end inside blocks; a flipped byte anywhere a destination reads, a digest
// of another lease or of a reused block, and malformed input each give their specific error.
#include "kv_transfer/kv_digest.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "attention/dcp_layout.h"
#include "attention/pool_layout.h"
#include "gtest/gtest.h"
#include "kv_transfer/copy_crcs.h"
#include "kv_transfer/crc32c.h"
#include "kv_transfer/planner.h"
#include "kv_transfer/stream_copy.h"
#include "tests/kv_transfer/plan_simulator.h"

namespace tandem {
namespace {

using ::tandem::testing::Rng;

TEST(Crc32cTest, StandardCheckValueAndChaining) {
  const std::string s = "123456789";
  EXPECT_EQ(Crc32c(0, s.data(), s.size()), 0xE3069283u);
  EXPECT_EQ(Crc32cPortable(0, s.data(), s.size()), 0xE3069283u);
  EXPECT_EQ(Crc32c(0, nullptr, 0), 0u);
  EXPECT_EQ(Crc32c(Crc32c(0, s.data(), 4), s.data() + 4, 5), 0xE3069283u);
}

// Every path (Crc32c: VPCLMULQDQ folding where the CPU has it; the SSE4.2 three-stream loop;
// the table) gives the same value around each path's boundaries (256-byte folding rounds, 8 KiB
// stripes) and at odd alignments.
TEST(Crc32cTest, HardwareMatchesPortableAtEveryLengthAndAlignment) {
  Rng rng(7);
  std::vector<unsigned char> buf(3 * 8192 * 2 + 100);
  for (unsigned char& b : buf) b = static_cast<unsigned char>(rng.Next());
  for (size_t n :
       {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{255}, size_t{256},
        size_t{257}, size_t{511}, size_t{512}, size_t{1000}, size_t{4095}, size_t{3 * 8192 - 1},
        size_t{3 * 8192}, size_t{3 * 8192 + 13}, size_t{6 * 8192 + 50}}) {
    for (size_t align : {size_t{0}, size_t{1}, size_t{5}}) {
      ASSERT_LE(align + n, buf.size());
      for (uint32_t seed : {0u, 0x1234u, 0xFFFFFFFFu}) {
        const uint32_t want = Crc32cPortable(seed, buf.data() + align, n);
        EXPECT_EQ(Crc32c(seed, buf.data() + align, n), want)
            << "n=" << n << " align=" << align << " path=" << Crc32cImplementation();
        EXPECT_EQ(Crc32cSse42(seed, buf.data() + align, n), want)
            << "n=" << n << " align=" << align << " hardware=" << Crc32cIsHardware();
      }
    }
  }
}

TEST(Crc32cTest, CombineEqualsChainingWithoutTheBytes) {
  Rng rng(9);
  std::vector<unsigned char> buf(70000);
  for (unsigned char& b : buf) b = static_cast<unsigned char>(rng.Next());
  for (size_t n : {size_t{0}, size_t{1}, size_t{8}, size_t{777}, size_t{65536}, buf.size()}) {
    for (uint32_t seed : {0u, 1u, 0xDEADBEEFu}) {
      EXPECT_EQ(Crc32cCombine(seed, Crc32c(0, buf.data(), n), n), Crc32c(seed, buf.data(), n))
          << "n=" << n << " seed=" << seed;
    }
  }
}

// The fused copy: the destination gets exactly the source's bytes (nothing before or after),
// and the value is the CRC of those bytes, around the folding boundaries and at odd alignments
// of either side.
TEST(Crc32cTest, CopyMovesTheBytesAndReturnsTheirCrc) {
  Rng rng(11);
  std::vector<unsigned char> src(3 * 8192 * 2 + 100);
  for (unsigned char& b : src) b = static_cast<unsigned char>(rng.Next());
  for (size_t n : {size_t{0}, size_t{1}, size_t{63}, size_t{255}, size_t{256}, size_t{257},
                   size_t{511}, size_t{4097}, size_t{3 * 8192 + 13}, size_t{6 * 8192 + 50}}) {
    for (size_t align : {size_t{0}, size_t{3}}) {
      for (uint32_t seed : {0u, 0xFFFFFFFFu}) {
        std::vector<unsigned char> dst(src.size() + 16, 0xAB);
        const uint32_t got = Crc32cCopy(seed, dst.data() + 8 + align, src.data() + align, n);
        EXPECT_EQ(got, Crc32cPortable(seed, src.data() + align, n)) << "n=" << n;
        EXPECT_EQ(std::memcmp(dst.data() + 8 + align, src.data() + align, n), 0) << "n=" << n;
        EXPECT_EQ(dst[7 + align], 0xAB) << "n=" << n;
        EXPECT_EQ(dst[8 + align + n], 0xAB) << "n=" << n;
      }
    }
  }
}

// The streaming copies (non-temporal stores from dst's first 64-byte boundary): the same bytes
// and CRC as the plain ones, for destinations at every offset from a 64-byte boundary that
// matters (aligned, inside the first line, the line's last byte) and sizes around the head and
// the 256-byte rounds.
TEST(Crc32cTest, StreamCopiesMoveTheBytesAndReturnTheirCrc) {
  Rng rng(12);
  std::vector<unsigned char> src(70000);
  for (unsigned char& b : src) b = static_cast<unsigned char>(rng.Next());
  std::vector<unsigned char> buf(src.size() + 256);
  unsigned char* const base = buf.data() + (64 - reinterpret_cast<uintptr_t>(buf.data()) % 64);
  for (size_t n : {size_t{0}, size_t{1}, size_t{255}, size_t{256}, size_t{300}, size_t{319},
                   size_t{320}, size_t{511}, size_t{4097}, size_t{65536 + 77}}) {
    for (size_t to : {size_t{0}, size_t{1}, size_t{33}, size_t{63}}) {
      for (size_t from : {size_t{0}, size_t{5}}) {
        SCOPED_TRACE(::testing::Message() << "n=" << n << " dst%64=" << to << " src+" << from);
        const unsigned char* in = src.data() + from;
        std::fill(buf.begin(), buf.end(), 0xAB);
        EXPECT_EQ(Crc32cStreamCopy(0x1234u, base + to, in, n), Crc32cPortable(0x1234u, in, n));
        EXPECT_EQ(std::memcmp(base + to, in, n), 0);
        EXPECT_EQ(base[to - 1], 0xAB);  // base is at least one byte into buf
        EXPECT_EQ(base[to + n], 0xAB);
        std::fill(buf.begin(), buf.end(), 0xAB);
        StreamCopy(base + to, in, n);
        EXPECT_EQ(std::memcmp(base + to, in, n), 0);
        EXPECT_EQ(base[to - 1], 0xAB);
        EXPECT_EQ(base[to + n], 0xAB);
      }
    }
  }
}

KvLayout Layout(ParallelConfig p, int32_t hkv) {
  return KvLayout{p, ModelDims{2, 8 * hkv, hkv, 4}, KvDType::kF32};
}

// Scattered, partly consecutive block ids.
std::vector<int32_t> Table(const KvLayout& l, int64_t num_tokens, int32_t salt) {
  const int64_t n = VirtualBlocksFor(l.parallel.dcp_geometry(), num_tokens);
  std::vector<int32_t> t;
  for (int64_t i = 0; i < n; ++i) {
    t.push_back(static_cast<int32_t>((i % 3 == 2 ? 40 : 3) + i * 2 + salt));
  }
  return t;
}

struct Pools {
  std::vector<std::vector<std::byte>> bytes;
  std::vector<absl::Span<const std::byte>> Views() const {
    std::vector<absl::Span<const std::byte>> v;
    for (const auto& b : bytes) v.emplace_back(b.data(), b.size());
    return v;
  }
};

Pools MakePools(const KvLayout& l, int32_t blocks, Rng& rng) {
  Pools p;
  for (int32_t r = 0; r < l.world(); ++r) {
    p.bytes.emplace_back(static_cast<size_t>(PoolBytes(RankPoolGeometry(l, r), blocks)));
    for (std::byte& b : p.bytes.back()) b = static_cast<std::byte>(rng.Next());
  }
  return p;
}

void Execute(const TransferPlan& plan, const Pools& src, Pools* dst) {
  for (size_t d = 0; d < plan.copies.size(); ++d) {
    for (const TransferCopy& c : plan.copies[d]) {
      std::memcpy(dst->bytes[d].data() + c.dst_offset, src.bytes[c.src_rank].data() + c.src_offset,
                  static_cast<size_t>(c.length));
    }
  }
}

struct Case {
  ParallelConfig src, dst;
  int32_t hkv;
};

const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = {
      {{1, 1, 1, 16, 16}, {1, 1, 1, 16, 16}, 4},  // identical, whole slabs
      {{1, 1, 1, 16, 1}, {1, 1, 1, 4, 1}, 4},     // B16 -> B4 (token runs)
      {{2, 1, 1, 8, 8}, {1, 1, 1, 16, 16}, 4},    // TP2 -> TP1, different B
      {{1, 1, 1, 16, 16}, {4, 1, 1, 16, 16}, 4},  // TP1 -> TP4: heads split
      {{1, 1, 1, 8, 8}, {4, 1, 1, 8, 8}, 2},      // destination replicas
      {{4, 1, 1, 8, 8}, {2, 1, 1, 16, 16}, 2},    // source replicas
      {{1, 1, 1, 4, 4}, {2, 1, 2, 8, 1}, 1},      // DCP2 interleave 1 on the destination
      {{2, 1, 2, 8, 4}, {2, 1, 2, 8, 2}, 1},      // DCP on both, different interleave
      {{1, 2, 1, 8, 8}, {2, 1, 1, 8, 8}, 4},      // PCP2 source -> TP2
      {{2, 2, 4, 4, 1}, {1, 1, 1, 16, 16}, 1},    // PCP2 x TP2 with DCP4 -> TP1
      {{2, 2, 2, 8, 2}, {4, 1, 4, 4, 2}, 1},      // PCP x DCP -> TP4 DCP4
      {{4, 1, 1, 8, 8}, {1, 1, 1, 8, 8}, 1},      // more source replicas than destinations
  };
  return cases;
}

constexpr int32_t kPoolBlocks = 96;

TEST(KvDigestTest, VerifiesAcrossLayoutsAndCatchesEveryFlippedByte) {
  Rng rng(11);
  int verified = 0, flips = 0;
  for (const Case& k : Cases()) {
    const KvLayout src = Layout(k.src, k.hkv);
    const KvLayout dst = Layout(k.dst, k.hkv);
    for (const int64_t n :
         {int64_t{1}, int64_t{15}, int64_t{16}, int64_t{17}, int64_t{61}, int64_t{100}}) {
      SCOPED_TRACE(absl::StrCat(src.parallel.ToString(), " -> ", dst.parallel.ToString(),
                                " hkv=", k.hkv, " n=", n));
      const std::vector<int32_t> sb = Table(src, n, 0);
      const std::vector<int32_t> db = Table(dst, n, 1);
      std::vector<uint32_t> gens(sb.size());
      for (uint32_t& g : gens) g = static_cast<uint32_t>(rng.Below(5));
      const KvDigestBinding binding{"req-1", 7, sb, gens};
      const Pools sp = MakePools(src, kPoolBlocks, rng);
      absl::StatusOr<std::vector<uint32_t>> digests = ComputeKvDigests(src, sp.Views(), n, binding);
      ASSERT_TRUE(digests.ok()) << digests.status();
      ASSERT_EQ(std::ssize(*digests), KvDigestCount(src, n));
      absl::StatusOr<TransferPlan> plan = PlanKvTransfer(src, sb, dst, db, n);
      ASSERT_TRUE(plan.ok()) << plan.status();
      Pools dp = MakePools(dst, kPoolBlocks, rng);
      Execute(*plan, sp, &dp);
      ASSERT_TRUE(VerifyKvDigests(src, dst, *plan, n, binding, *digests, dp.Views()).ok())
          << VerifyKvDigests(src, dst, *plan, n, binding, *digests, dp.Views());
      ++verified;
      // Checked range by range as blocks land (the decode node's overlapped check): every split
      // accepts what the whole check accepts.
      const int64_t blocks = VirtualBlocksFor(src.parallel.dcp_geometry(), n);
      for (int64_t b = 0; b <= blocks; ++b) {
        EXPECT_TRUE(
            VerifyKvDigestRange(src, dst, *plan, n, binding, *digests, dp.Views(), 0, b).ok())
            << "[0, " << b << ")";
        EXPECT_TRUE(
            VerifyKvDigestRange(src, dst, *plan, n, binding, *digests, dp.Views(), b, blocks).ok())
            << "[" << b << ", " << blocks << ")";
      }
      EXPECT_EQ(
          VerifyKvDigestRange(src, dst, *plan, n, binding, *digests, dp.Views(), 0, blocks + 1)
              .code(),
          absl::StatusCode::kInvalidArgument);

      // Another lease of the same request, or the same block after a reuse: refused.
      const KvDigestBinding other_lease{"req-1", 8, sb, gens};
      EXPECT_EQ(VerifyKvDigests(src, dst, *plan, n, other_lease, *digests, dp.Views()).code(),
                absl::StatusCode::kDataLoss);
      std::vector<uint32_t> bumped = gens;
      ++bumped[sb.size() - 1];
      const KvDigestBinding reused{"req-1", 7, sb, bumped};
      EXPECT_EQ(VerifyKvDigests(src, dst, *plan, n, reused, *digests, dp.Views()).code(),
                absl::StatusCode::kDataLoss);

      // A flipped byte at the start of a copy (always a prompt byte) of a random rank.
      int32_t d = static_cast<int32_t>(rng.Below(dst.world()));
      while (plan->copies[d].empty()) d = (d + 1) % dst.world();
      const TransferCopy& c = plan->copies[d][rng.Below(std::ssize(plan->copies[d]))];
      dp.bytes[d][c.dst_offset] ^= std::byte{0x10};
      std::vector<KvDigestMismatch> bad;
      const absl::Status s =
          VerifyKvDigests(src, dst, *plan, n, binding, *digests, dp.Views(), &bad);
      EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
      ASSERT_EQ(bad.size(), 1u) << s;
      EXPECT_EQ(bad[0].src_rank, c.src_rank);
      EXPECT_NE(std::find(bad[0].dst_ranks.begin(), bad[0].dst_ranks.end(), d),
                bad[0].dst_ranks.end());
      EXPECT_NE(std::string(s.message()).find(absl::StrCat("source rank ", c.src_rank)),
                std::string::npos)
          << s;
      // The range holding the bad block fails; the blocks around it still pass.
      const int64_t t = bad[0].table_index;
      EXPECT_EQ(
          VerifyKvDigestRange(src, dst, *plan, n, binding, *digests, dp.Views(), t, t + 1).code(),
          absl::StatusCode::kDataLoss);
      EXPECT_TRUE(
          VerifyKvDigestRange(src, dst, *plan, n, binding, *digests, dp.Views(), 0, t).ok());
      EXPECT_TRUE(
          VerifyKvDigestRange(src, dst, *plan, n, binding, *digests, dp.Views(), t + 1, blocks)
              .ok());
      ++flips;
    }
  }
  EXPECT_EQ(verified, 6 * std::ssize(Cases()));
  EXPECT_EQ(flips, verified);
}

// Pulls `plan` as a puller that moves the bytes itself does (CopyWithCrcs with the check's CRC
// requests), and returns what it CRCed.
std::shared_ptr<const LandedCrcs> ExecuteWithCrcs(const KvLayout& src, const TransferPlan& plan,
                                                  int64_t n, const std::vector<int32_t>& table,
                                                  const Pools& sp, Pools* dp) {
  absl::StatusOr<std::vector<CopyCrcs>> req = KvDigestCrcRequests(src, plan, n, table);
  EXPECT_TRUE(req.ok()) << req.status();
  auto landed = std::make_shared<LandedCrcs>();
  if (!req.ok()) return landed;
  for (size_t d = 0; d < plan.copies.size(); ++d) {
    for (size_t i = 0; i < plan.copies[d].size(); ++i) {
      const TransferCopy& c = plan.copies[d][i];
      // Every other copy with non-temporal stores: both kinds land the same bytes and CRCs.
      CopyWithCrcs(dp->bytes[d].data() + c.dst_offset, sp.bytes[c.src_rank].data() + c.src_offset,
                   c.length, &(*req)[d], static_cast<int64_t>(i), /*stream=*/i % 2 == 1);
    }
    landed->Add(static_cast<int32_t>(d), plan.copies[d], (*req)[d]);
  }
  return landed;
}

// The check fused into the copy (copy_crcs.h): over every layout pair and prompt length, the
// CRCs a pull computes cover every part the check reads — it passes with the destination pools
// wiped, so nothing was read again — and a source byte that changed before the copy is caught.
// Pulled in two range plans split inside a block (pipelined), the parts the two plans cut
// differently from the whole plan are read back, and the check still passes.
TEST(KvDigestTest, CrcsComputedInTheCopyVerifyWithoutReadingAndCatchAChangedByte) {
  Rng rng(13);
  for (const Case& k : Cases()) {
    const KvLayout src = Layout(k.src, k.hkv);
    const KvLayout dst = Layout(k.dst, k.hkv);
    for (const int64_t n : {int64_t{1}, int64_t{17}, int64_t{61}, int64_t{100}}) {
      SCOPED_TRACE(absl::StrCat(src.parallel.ToString(), " -> ", dst.parallel.ToString(),
                                " hkv=", k.hkv, " n=", n));
      const std::vector<int32_t> sb = Table(src, n, 0);
      const std::vector<int32_t> db = Table(dst, n, 1);
      const std::vector<uint32_t> gens(sb.size(), 2);
      const KvDigestBinding binding{"req-2", 3, sb, gens};
      Pools sp = MakePools(src, kPoolBlocks, rng);
      absl::StatusOr<std::vector<uint32_t>> digests = ComputeKvDigests(src, sp.Views(), n, binding);
      ASSERT_TRUE(digests.ok()) << digests.status();
      absl::StatusOr<TransferPlan> plan = PlanKvTransfer(src, sb, dst, db, n);
      ASSERT_TRUE(plan.ok()) << plan.status();
      const int64_t blocks = VirtualBlocksFor(src.parallel.dcp_geometry(), n);

      Pools dp = MakePools(dst, kPoolBlocks, rng);
      const LandedCrcList landed = {ExecuteWithCrcs(src, *plan, n, sb, sp, &dp)};
      EXPECT_TRUE(VerifyKvDigests(src, dst, *plan, n, binding, *digests, dp.Views()).ok());
      for (auto& b : dp.bytes) std::fill(b.begin(), b.end(), std::byte{0});
      EXPECT_TRUE(VerifyKvDigestRange(src, dst, *plan, n, binding, *digests, dp.Views(), 0, blocks,
                                      nullptr, 1, &landed)
                      .ok());

      // A source byte changed before the copy read it (the first byte of a copy is a prompt byte).
      const TransferCopy& c = plan->copies[0].front();
      sp.bytes[c.src_rank][c.src_offset] ^= std::byte{0x20};
      const LandedCrcList bad_landed = {ExecuteWithCrcs(src, *plan, n, sb, sp, &dp)};
      std::vector<KvDigestMismatch> bad;
      EXPECT_EQ(VerifyKvDigestRange(src, dst, *plan, n, binding, *digests, dp.Views(), 0, blocks,
                                    &bad, 1, &bad_landed)
                    .code(),
                absl::StatusCode::kDataLoss);
      ASSERT_FALSE(bad.empty());
      EXPECT_EQ(bad[0].src_rank, c.src_rank);
      sp.bytes[c.src_rank][c.src_offset] ^= std::byte{0x20};

      // Two range plans cut at a token inside a block.
      const int64_t cut = n / 2;
      LandedCrcList ranges;
      for (auto [b, e] : {std::pair{int64_t{0}, cut}, std::pair{cut, n}}) {
        if (b == e) continue;
        absl::StatusOr<TransferPlan> part = PlanKvTransferRange(src, sb, dst, db, n, b, e);
        ASSERT_TRUE(part.ok()) << part.status();
        ranges.push_back(ExecuteWithCrcs(src, *part, n, sb, sp, &dp));
      }
      EXPECT_TRUE(VerifyKvDigestRange(src, dst, *plan, n, binding, *digests, dp.Views(), 0, blocks,
                                      nullptr, 1, &ranges)
                      .ok());
    }
  }
}

TEST(KvDigestTest, MalformedInputIsRefusedPrecisely) {
  Rng rng(3);
  const KvLayout l = Layout({1, 1, 1, 16, 16}, 2);
  const std::vector<int32_t> table = {4, 5};
  const std::vector<uint32_t> gens = {1, 1};
  const Pools pools = MakePools(l, 8, rng);
  const KvDigestBinding ok{"r", 1, table, gens};
  absl::StatusOr<std::vector<uint32_t>> digests = ComputeKvDigests(l, pools.Views(), 20, ok);
  ASSERT_TRUE(digests.ok()) << digests.status();

  const std::vector<uint32_t> short_gens = {1};
  EXPECT_EQ(ComputeKvDigests(l, pools.Views(), 20, {"r", 1, table, short_gens}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ComputeKvDigests(l, pools.Views(), 40, ok).status().code(),
            absl::StatusCode::kInvalidArgument);  // needs 3 blocks
  const std::vector<int32_t> outside = {4, 8};
  EXPECT_EQ(ComputeKvDigests(l, pools.Views(), 20, {"r", 1, outside, gens}).status().code(),
            absl::StatusCode::kInvalidArgument);

  absl::StatusOr<TransferPlan> plan = PlanKvTransfer(l, table, l, {0, 1}, 20);
  ASSERT_TRUE(plan.ok());
  Pools dst = MakePools(l, 8, rng);
  Execute(*plan, pools, &dst);
  const std::vector<uint32_t> fewer(digests->begin(), digests->end() - 1);
  EXPECT_EQ(VerifyKvDigests(l, l, *plan, 20, ok, fewer, dst.Views()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(VerifyKvDigests(l, l, *plan, 20, ok, *digests, dst.Views()).ok());
  // A plan that reads less than a unit's prompt bytes (a truncated pull).
  TransferPlan truncated = *plan;
  truncated.copies[0].back().length /= 2;
  EXPECT_EQ(VerifyKvDigests(l, l, truncated, 20, ok, *digests, dst.Views()).code(),
            absl::StatusCode::kInternal);
}

// Checks recorded for full blocks (what the prefix cache keeps) bind to another request's
// digests exactly as reading the bytes would; a block changed since its checks were recorded
// then fails verification on the destination.
TEST(KvDigestTest, RecordedBlockChecksGiveTheSameDigestsAndCatchLaterCorruption) {
  Rng rng(13);
  for (const Case& k : Cases()) {
    const KvLayout src = Layout(k.src, k.hkv);
    const KvLayout dst = Layout(k.dst, k.hkv);
    const int64_t v = VirtualBlockTokens(src.parallel.dcp_geometry());
    const int64_t n = 3 * v + 1;  // three full blocks and a partial one
    SCOPED_TRACE(absl::StrCat(src.parallel.ToString(), " -> ", dst.parallel.ToString()));
    const std::vector<int32_t> sb = Table(src, n, 0);
    const std::vector<uint32_t> gens(sb.size(), 3);
    Pools sp = MakePools(src, kPoolBlocks, rng);
    std::vector<KvBlockChecks> first;
    ASSERT_TRUE(ComputeKvDigests(src, sp.Views(), n, {"first", 1, sb, gens}, 1, {}, &first).ok());
    ASSERT_EQ(first.size(), 4u);
    EXPECT_TRUE(first[3].empty());
    for (int64_t i = 0; i < 3; ++i) {
      absl::StatusOr<KvBlockChecks> c = ComputeKvBlockChecks(src, sp.Views(), sb[i]);
      ASSERT_TRUE(c.ok()) << c.status();
      EXPECT_EQ(*c, first[i]);
    }
    // A later request reusing blocks 0 and 1: the same digests as computed from the bytes.
    const KvDigestBinding later{"later", 9, sb, gens};
    const std::vector<KvBlockChecks> known = {first[0], first[1]};
    absl::StatusOr<std::vector<uint32_t>> bound =
        ComputeKvDigests(src, sp.Views(), n, later, 1, known);
    absl::StatusOr<std::vector<uint32_t>> read = ComputeKvDigests(src, sp.Views(), n, later);
    ASSERT_TRUE(bound.ok() && read.ok());
    EXPECT_EQ(*bound, *read);
    // Block 1 corrupted while cached (on every rank: the planner may read any replica):
    // digests from its recorded checks no longer verify.
    for (auto& pool : sp.bytes) {
      pool[static_cast<size_t>(sb[1] * RankPoolGeometry(src, 0).block_bytes())] ^= std::byte{0x20};
    }
    bound = ComputeKvDigests(src, sp.Views(), n, later, 1, known);
    ASSERT_TRUE(bound.ok());
    absl::StatusOr<TransferPlan> plan = PlanKvTransfer(src, sb, dst, Table(dst, n, 1), n);
    ASSERT_TRUE(plan.ok());
    Pools dp = MakePools(dst, kPoolBlocks, rng);
    Execute(*plan, sp, &dp);
    std::vector<KvDigestMismatch> bad;
    EXPECT_EQ(VerifyKvDigests(src, dst, *plan, n, later, *bound, dp.Views(), &bad).code(),
              absl::StatusCode::kDataLoss);
    ASSERT_FALSE(bad.empty());
    EXPECT_EQ(bad[0].table_index, 1);
    EXPECT_NE(*ComputeKvBlockChecks(src, sp.Views(), sb[1]), first[1]);
  }
  // Checks for a block that is not full, or of the wrong size: refused by name.
  const KvLayout l = Layout({1, 1, 1, 16, 16}, 2);
  const std::vector<int32_t> table = {4, 5};
  const std::vector<uint32_t> gens = {1, 1};
  const Pools pools = MakePools(l, 8, rng);
  const std::vector<KvBlockChecks> partial = {{}, {1, 2}};
  EXPECT_EQ(
      ComputeKvDigests(l, pools.Views(), 20, {"r", 1, table, gens}, 1, partial).status().code(),
      absl::StatusCode::kInvalidArgument);
  const std::vector<KvBlockChecks> wrong_size = {{1, 2, 3}};
  EXPECT_EQ(
      ComputeKvDigests(l, pools.Views(), 20, {"r", 1, table, gens}, 1, wrong_size).status().code(),
      absl::StatusCode::kInvalidArgument);
}

// 64 MiB of KV: split over four threads, the same digests and the same verdicts as one.
TEST(KvDigestTest, ThreadsGiveTheSameDigestsAndVerdicts) {
  Rng rng(5);
  const KvLayout l{ParallelConfig{1, 1, 1, 16, 16}, ModelDims{32, 64, 8, 128}, KvDType::kF32};
  const int64_t n = 16 * 16 - 3;
  std::vector<int32_t> table(16);
  for (int32_t i = 0; i < 16; ++i) table[i] = 15 - i;
  const std::vector<uint32_t> gens(16, 2);
  const KvDigestBinding binding{"big", 4, table, gens};
  const Pools src = MakePools(l, 16, rng);
  absl::StatusOr<std::vector<uint32_t>> one = ComputeKvDigests(l, src.Views(), n, binding, 1);
  absl::StatusOr<std::vector<uint32_t>> four = ComputeKvDigests(l, src.Views(), n, binding, 4);
  ASSERT_TRUE(one.ok() && four.ok());
  EXPECT_EQ(*one, *four);
  absl::StatusOr<TransferPlan> plan = PlanKvTransfer(l, table, l, table, n);
  ASSERT_TRUE(plan.ok());
  Pools dst = MakePools(l, 16, rng);
  Execute(*plan, src, &dst);
  EXPECT_TRUE(VerifyKvDigests(l, l, *plan, n, binding, *four, dst.Views(), nullptr, 4).ok());
  dst.bytes[0][KvByteOffset(RankPoolGeometry(l, 0), table[9], 5, 31, 1, 15)] ^= std::byte{1};
  std::vector<KvDigestMismatch> bad;
  EXPECT_EQ(VerifyKvDigests(l, l, *plan, n, binding, *four, dst.Views(), &bad, 4).code(),
            absl::StatusCode::kDataLoss);
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_EQ(bad[0].table_index, 9);
  EXPECT_EQ(bad[0].head, 5);
}

}  // namespace
}  // namespace tandem
