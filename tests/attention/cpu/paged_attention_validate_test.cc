// ValidateAttentionCall and ValidateKvCacheWrite name the first problem precisely.
#include <cstdint>
#include <string>
#include <vector>

#include "attention/cpu/paged_attention.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

// A valid call: pool of 10 blocks (B = 4, 2 KV heads, 2 layers), a DCP group of N = 2 with
// interleave 2 (virtual blocks of 8 tokens), request 0 with table [3, 1, 4] attended at
// position 15 (2 entries used), request 1 with table [5, 9] at position 10.
class ValidateAttentionTest : public ::testing::Test {
 protected:
  ValidateAttentionTest() : pool_bytes_(PoolBytes(Geometry(), 10)) {
    pool_ = KvPoolView{pool_bytes_.data(), 10, Geometry()};
    Refresh();
  }

  static PoolGeometry Geometry() {
    PoolGeometry g;
    g.num_kv_heads = 2;
    g.num_layers = 2;
    g.block_size = 4;
    g.head_dim = 8;
    return g;
  }

  // Re-points `rows_` at the (possibly edited) vectors.
  void Refresh() {
    rows_.num_rows = static_cast<int64_t>(request_.size());
    rows_.request = request_.data();
    rows_.position = position_.data();
    rows_.tables =
        BlockTablesView{ids_.data(), offsets_.data(), static_cast<int32_t>(offsets_.size()) - 1};
  }

  absl::Status Validate(int32_t layer = 1, int32_t q_heads = 4) {
    Refresh();
    return ValidateAttentionCall(pool_, layer, rows_, q_heads);
  }

  void ExpectInvalid(const absl::Status& s, const std::string& message) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_EQ(s.message(), message);
  }

  std::vector<uint8_t> pool_bytes_;
  KvPoolView pool_;
  std::vector<int32_t> ids_ = {3, 1, 4, 5, 9};
  std::vector<int64_t> offsets_ = {0, 3, 5};
  std::vector<int32_t> request_ = {0, 1};
  std::vector<int64_t> position_ = {15, 10};
  AttentionRows rows_{0, nullptr, nullptr, {}, DcpGeometry{4, 2, 2}, 0};
};

TEST_F(ValidateAttentionTest, AcceptsAValidCall) { EXPECT_TRUE(Validate().ok()) << Validate(); }

TEST_F(ValidateAttentionTest, BlockTableTooShortForThePosition) {
  position_[1] = 16;
  ExpectInvalid(Validate(), "row 1: position 16 needs 3 block table entries but request 1 has 2");
}

TEST_F(ValidateAttentionTest, BlockIdOutsideThePool) {
  ids_[1] = 10;
  ExpectInvalid(Validate(),
                "block id 10 at entry 1 of request 0's block table is outside the pool [0, 10)");
  ids_[1] = -1;
  ExpectInvalid(Validate(),
                "block id -1 at entry 1 of request 0's block table is outside the pool [0, 10)");
}

TEST_F(ValidateAttentionTest, UnusedTableEntriesAreNotChecked) {
  ids_[2] = 99;  // request 0 at position 15 reads entries 0 and 1 only
  EXPECT_TRUE(Validate().ok()) << Validate();
}

TEST_F(ValidateAttentionTest, QueryHeadsNotAMultipleOfKvHeads) {
  ExpectInvalid(Validate(1, 3),
                "num_q_heads=3 is not a positive multiple of the pool's num_kv_heads=2");
  ExpectInvalid(Validate(1, 0),
                "num_q_heads=0 is not a positive multiple of the pool's num_kv_heads=2");
}

TEST_F(ValidateAttentionTest, BlockSizeDiffersBetweenDcpGeometryAndPool) {
  rows_.dcp.block_size = 8;
  ExpectInvalid(Validate(), "dcp block_size B=8 differs from the pool's block_size 4");
}

TEST_F(ValidateAttentionTest, InvalidDcpGeometry) {
  rows_.dcp.interleave = 3;
  ExpectInvalid(Validate(),
                "dcp geometry: block_size % interleave must be 0 (block_size=4, interleave=3); "
                "valid interleaves divide the block size");
}

TEST_F(ValidateAttentionTest, DcpRankOutsideTheGroup) {
  rows_.dcp_rank = 2;
  ExpectInvalid(Validate(), "dcp_rank 2 is outside [0, 2)");
}

TEST_F(ValidateAttentionTest, LayerOutsideThePool) {
  ExpectInvalid(Validate(2), "layer 2 is outside the pool's [0, 2)");
  ExpectInvalid(Validate(-1), "layer -1 is outside the pool's [0, 2)");
}

TEST_F(ValidateAttentionTest, RequestIndexOutOfRange) {
  request_[1] = 2;
  ExpectInvalid(Validate(), "row 1: request 2 is outside [0, 2)");
}

TEST_F(ValidateAttentionTest, PaddingRowsNeedNoRequestOrTable) {
  request_.push_back(77);  // out of range, but a padding row's request is never read
  position_.push_back(-1);
  EXPECT_TRUE(Validate().ok()) << Validate();
}

TEST_F(ValidateAttentionTest, DecreasingBlockTableOffsets) {
  offsets_ = {0, 3, 2};
  ExpectInvalid(Validate(), "block table offsets of request 1 (3, 2) are negative or decreasing");
}

TEST_F(ValidateAttentionTest, NullPoolWithBlocks) {
  pool_.base = nullptr;
  ExpectInvalid(Validate(), "pool base is null but num_blocks=10");
}

TEST_F(ValidateAttentionTest, UnknownDtype) {
  pool_.geometry.dtype = static_cast<KvDType>(7);
  ExpectInvalid(Validate(), "pool dtype 7 is not f32, f16 or bf16");
}

TEST_F(ValidateAttentionTest, NonPositiveGeometry) {
  pool_.geometry.head_dim = 0;
  ExpectInvalid(Validate(),
                "pool geometry needs num_kv_heads, num_layers, block_size and head_dim >= 1 "
                "(got 2, 2, 4, 0)");
}

TEST_F(ValidateAttentionTest, NullRowArrays) {
  Refresh();
  rows_.position = nullptr;
  ExpectInvalid(ValidateAttentionCall(pool_, 1, rows_, 4), "row request or position array is null");
}

TEST_F(ValidateAttentionTest, KvCacheWriteSlots) {
  const std::vector<int64_t> ok = {0, -1, 39};
  EXPECT_TRUE(ValidateKvCacheWrite(pool_, 1, ok.data(), 3).ok());
  const std::vector<int64_t> past_end = {0, 40};
  ExpectInvalid(ValidateKvCacheWrite(pool_, 1, past_end.data(), 2),
                "row 1: slot 40 is outside the pool [0, 40) and is not -1");
  const std::vector<int64_t> negative = {-2};
  ExpectInvalid(ValidateKvCacheWrite(pool_, 1, negative.data(), 1),
                "row 0: slot -2 is outside the pool [0, 40) and is not -1");
  ExpectInvalid(ValidateKvCacheWrite(pool_, 2, ok.data(), 3),
                "layer 2 is outside the pool's [0, 2)");
}

}  // namespace
}  // namespace tandem
