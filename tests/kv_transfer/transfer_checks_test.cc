// Unit tests of the checks the UCX engine runs before touching UCX (no UCX involved).
#include "kv_transfer/ucx/transfer_checks.h"

#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/kv_transfer/status_matchers.h"

namespace tandem::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// md map = {0, 2}: md 0 with a 0-byte key, md 2 with a 3-byte key, then a 2-byte trailer.
std::string GoodRkey() {
  std::string r = {'\x05',         0,         0,         0,   0,   0,  0, 0,
                   /*mem type*/ 0, /*md0*/ 0, /*md2*/ 3, 'a', 'b', 'c'};
  return r + "zz";
}

TransferMetadata Metadata() {
  TransferMetadata m;
  m.engine_id = "p0";
  m.epoch = 3;
  m.compat_hash = 0xabc;
  m.layout = KvLayout{ParallelConfig{2, 1, 1, 16, 1}, ModelDims{2, 4, 2, 8}, KvDType::kF32};
  for (int r = 0; r < 2; ++r) {
    m.ranks.push_back(
        RankTransferInfo{"worker-" + std::to_string(r), 0x1000u * (r + 1), 4096, GoodRkey()});
  }
  return m;
}

TEST(TransferChecksTest, AcceptsWellFormedMetadata) {
  EXPECT_OK(ValidateTransferMetadata(Metadata()));
}

TEST(TransferChecksTest, NamesTheBadField) {
  TransferMetadata m = Metadata();
  m.engine_id.clear();
  EXPECT_THAT(ValidateTransferMetadata(m),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("engine_id is empty")));

  m = Metadata();
  m.ranks.pop_back();
  EXPECT_THAT(ValidateTransferMetadata(m),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("ranks has 1 entries"), HasSubstr("world 2"))));

  m = Metadata();
  m.ranks[1].worker_address.clear();
  EXPECT_THAT(ValidateTransferMetadata(m), StatusIs(absl::StatusCode::kInvalidArgument,
                                                    HasSubstr("ranks[1].worker_address is empty")));
  m = Metadata();
  m.ranks[0].pool_base = 0;
  EXPECT_THAT(ValidateTransferMetadata(m),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ranks[0].pool_base is 0")));
  m = Metadata();
  m.ranks[0].pool_bytes = 0;
  EXPECT_THAT(ValidateTransferMetadata(m), StatusIs(absl::StatusCode::kInvalidArgument,
                                                    HasSubstr("ranks[0].pool_bytes must be > 0")));
  m = Metadata();
  m.ranks[1].pool_base = std::numeric_limits<uint64_t>::max() - 100;
  EXPECT_THAT(ValidateTransferMetadata(m),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("ranks[1].pool_base + pool_bytes overflows")));
  m = Metadata();
  m.layout.parallel.dcp = 3;  // world 2 cannot host dcp 3
  EXPECT_THAT(ValidateTransferMetadata(m),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("layout: ")));
}

TEST(TransferChecksTest, RkeyShape) {
  EXPECT_OK(ValidatePackedRkeyShape(GoodRkey()));
  const std::string good = GoodRkey();
  EXPECT_THAT(ValidatePackedRkeyShape(good.substr(0, 8)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("header alone is 9")));
  EXPECT_THAT(ValidatePackedRkeyShape(good.substr(0, 9)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("memory domain 0 starts at byte 9 of 9")));
  EXPECT_THAT(ValidatePackedRkeyShape(good.substr(0, 12)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("memory domain 2 ends at byte 14 of 12")));
  // All 64 domains set: needs 64 length bytes at least.
  std::string all(8, '\xff');
  all += std::string(10, '\0');
  EXPECT_THAT(ValidatePackedRkeyShape(all),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("truncated")));
  TransferMetadata m = Metadata();
  m.ranks[1].rkey = good.substr(0, 12);
  EXPECT_THAT(ValidateTransferMetadata(m),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("ranks[1].rkey: packed rkey is truncated"))));
  m.ranks[1].rkey.clear();
  EXPECT_THAT(ValidateTransferMetadata(m),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ranks[1].rkey is empty")));
}

TEST(TransferChecksTest, PackedRkeyLayoutByUcxVersion) {
  EXPECT_EQ(PackedRkeyLayoutFor(1, 13), PackedRkeyLayout::kEntries);
  EXPECT_EQ(PackedRkeyLayoutFor(1, 19), PackedRkeyLayout::kEntries);
  EXPECT_EQ(PackedRkeyLayoutFor(1, 20), PackedRkeyLayout::kEntriesSysDevice);
  EXPECT_EQ(PackedRkeyLayoutFor(1, 22), PackedRkeyLayout::kEntriesSysDevice);
  EXPECT_EQ(PackedRkeyLayoutFor(2, 0), PackedRkeyLayout::kEntriesSysDevice);
}

// UCX 1.20+ (ucp_rkey_pack_memh): the entries, then a system device byte; 0xFF (unknown, host
// memory) ends the key, any other device is followed by 3-byte distances and a 0xFF terminator.
TEST(TransferChecksTest, RkeyShapeWithSystemDevice) {
  constexpr auto kSys = PackedRkeyLayout::kEntriesSysDevice;
  const std::string entries = GoodRkey().substr(0, 14);  // header, md0 and md2: no trailer
  const std::string host = entries + "\xff";
  const std::string device =
      entries + std::string{'\x03', '\x01', 'l', 'b', '\x02', 'l', 'b', '\xff'};
  const std::string flushed = entries + std::string{'\x83', '\x01', 'l', 'b', '\xff'};
  EXPECT_OK(ValidatePackedRkeyShape(host, kSys));
  EXPECT_OK(ValidatePackedRkeyShape(device, kSys));
  EXPECT_OK(ValidatePackedRkeyShape(flushed, kSys));
  // An empty md map has no system device byte in any version.
  const std::string empty_map(9, '\0');
  EXPECT_OK(ValidatePackedRkeyShape(empty_map, kSys));
  // What UCX < 1.20 packs for host memory is 1.20+'s key cut by its last byte.
  EXPECT_OK(ValidatePackedRkeyShape(entries, PackedRkeyLayout::kEntries));
  EXPECT_THAT(ValidatePackedRkeyShape(entries, kSys),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("truncated: the system device byte UCX 1.20 and later put after "
                                 "the entries would be byte 14 of 14")));
  // Every cut of a device key is refused: inside a distance, or before the terminator.
  for (size_t keep = 15; keep < device.size(); ++keep) {
    SCOPED_TRACE(::testing::Message() << "bytes kept: " << keep);
    EXPECT_THAT(
        ValidatePackedRkeyShape(device.substr(0, keep), kSys),
        StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("packed rkey is truncated")));
  }
  EXPECT_THAT(ValidatePackedRkeyShape(device.substr(0, 16), kSys),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("distance at byte 15 ends at byte 18 of 16")));
  EXPECT_THAT(ValidatePackedRkeyShape(device.substr(0, 21), kSys),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("distances of system device 3 have no terminator")));
  // The entries are checked first, in both layouts.
  EXPECT_THAT(ValidatePackedRkeyShape(entries.substr(0, 12), kSys),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("memory domain 2 ends at byte 14 of 12")));
  TransferMetadata m = Metadata();
  m.ranks[0].rkey = host;
  m.ranks[1].rkey = entries;
  EXPECT_OK(ValidateTransferMetadata(m));
  EXPECT_THAT(ValidateTransferMetadata(m, kSys),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("ranks[1].rkey: packed rkey is truncated: the system device")));
}

TEST(TransferChecksTest, HandshakeRejectsAnotherHashWithBothValues) {
  const TransferMetadata m = Metadata();
  EXPECT_OK(CheckHandshake(0xabc, m));
  EXPECT_THAT(CheckHandshake(0xdef, m),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("engine 'p0' epoch 3"), HasSubstr("0xabc"),
                             HasSubstr("expects 0xdef"))));
  TransferMetadata bad = m;
  bad.ranks.clear();
  // A malformed source is INVALID_ARGUMENT even when the hash matches.
  EXPECT_THAT(CheckHandshake(0xabc, bad),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ranks has 0 entries")));
}

TEST(TransferChecksTest, CopiesMustLieInsideBothPools) {
  const TransferMetadata m = Metadata();
  const std::vector<TransferCopy> ok = {{0, 0, 0, 4096}, {1, 4000, 100, 96}};
  EXPECT_OK(ValidateCopies(ok, m, 4096));
  EXPECT_OK(ValidateCopies({}, m, 0));

  auto check = [&](TransferCopy c, int64_t local, const char* message) {
    EXPECT_THAT(ValidateCopies({ok[0], c}, m, local),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr("copy 1"), HasSubstr(message))))
        << message;
  };
  check({0, 0, 0, 0}, 4096, "length must be > 0");
  check({-1, 0, 0, 8}, 4096, "source rank -1 outside [0, 2)");
  check({2, 0, 0, 8}, 4096, "source rank 2 outside [0, 2)");
  check({0, 4090, 0, 8}, 4096, "exceeds source rank 0's pool of 4096 bytes");
  check({0, -8, 0, 8}, 4096, "source range [-8");
  check({1, 0, 4090, 8}, 4096, "exceeds the local pool of 4096 bytes");
  EXPECT_THAT(ValidateCopies({{1, 0, 0, 8}}, m, 4),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("copy 0: destination range [0, +8) exceeds the local pool of 4")));
  // Offsets near INT64_MAX must not overflow into "fits".
  check({0, std::numeric_limits<int64_t>::max() - 2, 0, 8}, 4096, "source range");
  check({0, 0, std::numeric_limits<int64_t>::max() - 2, 8}, 4096, "destination range");
}

}  // namespace
}  // namespace tandem::testing
