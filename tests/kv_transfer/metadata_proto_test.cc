// Unit tests of TransferMetadata <-> tandem.v1.TransferMetadata (no UCX involved).
#include "kv_transfer/ucx/metadata_proto.h"

#include <string>

#include "attention/parallel_layout.h"
#include "gtest/gtest.h"
#include "tests/kv_transfer/status_matchers.h"

namespace tandem::testing {
namespace {

using ::testing::HasSubstr;

TransferMetadata Metadata() {
  TransferMetadata m;
  m.engine_id = "prefill-7";
  m.epoch = 42;
  m.compat_hash = 0x1234567890abcdefull;
  // tp=4 > Hkv=2: replicated heads, dcp=2 — placement is non-trivial.
  m.layout = KvLayout{ParallelConfig{4, 2, 2, 16, 4}, ModelDims{3, 8, 2, 64}, KvDType::kBF16};
  for (int r = 0; r < m.layout.world(); ++r) {
    const std::string rkey = {'\x01', 0, 0, 0, 0, 0, 0, 0, 0, 2, static_cast<char>(r), 'k'};
    m.ranks.push_back(RankTransferInfo{std::string("addr\0ess", 8) + std::to_string(r),
                                       0x7f0000000000ull + r * 0x100000ull, 1 << 20, rkey});
  }
  return m;
}

void ExpectSame(const TransferMetadata& a, const TransferMetadata& b) {
  EXPECT_EQ(a.engine_id, b.engine_id);
  EXPECT_EQ(a.epoch, b.epoch);
  EXPECT_EQ(a.compat_hash, b.compat_hash);
  EXPECT_EQ(a.layout.parallel.ToString(), b.layout.parallel.ToString());
  EXPECT_EQ(a.layout.dims.num_layers, b.layout.dims.num_layers);
  EXPECT_EQ(a.layout.dims.num_q_heads, b.layout.dims.num_q_heads);
  EXPECT_EQ(a.layout.dims.num_kv_heads, b.layout.dims.num_kv_heads);
  EXPECT_EQ(a.layout.dims.head_dim, b.layout.dims.head_dim);
  EXPECT_EQ(a.layout.dtype, b.layout.dtype);
  ASSERT_EQ(a.ranks.size(), b.ranks.size());
  for (size_t r = 0; r < a.ranks.size(); ++r) {
    EXPECT_EQ(a.ranks[r].worker_address, b.ranks[r].worker_address);
    EXPECT_EQ(a.ranks[r].pool_base, b.ranks[r].pool_base);
    EXPECT_EQ(a.ranks[r].pool_bytes, b.ranks[r].pool_bytes);
    EXPECT_EQ(a.ranks[r].rkey, b.ranks[r].rkey);
  }
}

TEST(MetadataProtoTest, RoundTripsAndCarriesPlacement) {
  const TransferMetadata m = Metadata();
  absl::StatusOr<TransferMetadata> back = ParseTransferMetadata(SerializeTransferMetadata(m));
  ASSERT_OK(back);
  ExpectSame(m, *back);
  const v1::TransferMetadata p = ToProto(m);
  for (int r = 0; r < p.ranks_size(); ++r) {
    const RankPlacement place = PlaceRank(m.layout.parallel, m.layout.dims, r);
    EXPECT_EQ(p.ranks(r).kv_head_begin(), place.kv_head_begin);
    EXPECT_EQ(p.ranks(r).kv_head_count(), place.kv_head_count);
    EXPECT_EQ(p.ranks(r).dcp_rank(), place.dcp_rank);
  }
  EXPECT_EQ(p.layout().dtype(), v1::KV_DTYPE_BF16);
}

TEST(MetadataProtoTest, ChecksumCoversEveryUcxField) {
  const v1::TransferMetadata good = ToProto(Metadata());
  auto expect_rejected = [](v1::TransferMetadata p, const char* what) {
    EXPECT_THAT(FromProto(p), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("ranks[3].checksum does not match")))
        << what;
  };
  v1::TransferMetadata p = good;
  p.mutable_ranks(3)->mutable_worker_address()->back() ^= 1;
  expect_rejected(p, "worker_address");
  p = good;
  p.mutable_ranks(3)->set_pool_base(good.ranks(3).pool_base() + 4096);
  expect_rejected(p, "pool_base");
  p = good;
  p.mutable_ranks(3)->set_pool_bytes(good.ranks(3).pool_bytes() * 2);
  expect_rejected(p, "pool_bytes");
  p = good;
  p.mutable_ranks(3)->mutable_rkey()->append("x");
  expect_rejected(p, "rkey");
}

TEST(MetadataProtoTest, RejectsMissingOrUnknownFields) {
  v1::TransferMetadata p = ToProto(Metadata());
  p.clear_layout();
  EXPECT_THAT(FromProto(p),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("layout is missing")));
  p = ToProto(Metadata());
  p.mutable_layout()->clear_dims();
  EXPECT_THAT(FromProto(p),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("layout.dims is missing")));
  p = ToProto(Metadata());
  p.mutable_layout()->clear_parallel();
  EXPECT_THAT(FromProto(p), StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("layout.parallel is missing")));
  p = ToProto(Metadata());
  p.mutable_layout()->set_dtype(static_cast<v1::KvDType>(9));
  EXPECT_THAT(FromProto(p), StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("layout.dtype has unknown value 9")));
  p = ToProto(Metadata());
  p.mutable_ranks()->RemoveLast();
  EXPECT_THAT(FromProto(p), StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("ranks has 7 entries but layout")));
  p = ToProto(Metadata());
  p.set_engine_id("");
  EXPECT_THAT(FromProto(p),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("engine_id is empty")));
}

TEST(MetadataProtoTest, RejectsAPeerThatPlacesHeadsDifferently) {
  v1::TransferMetadata p = ToProto(Metadata());
  p.mutable_ranks(5)->set_dcp_rank(p.ranks(5).dcp_rank() ^ 1);
  EXPECT_THAT(FromProto(p),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ranks[5] placement")));
  p = ToProto(Metadata());
  p.mutable_ranks(2)->set_kv_head_begin(p.ranks(2).kv_head_begin() + 1);
  EXPECT_THAT(FromProto(p),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ranks[2] placement")));
}

TEST(MetadataProtoTest, RejectsBytesThatAreNotTheMessage) {
  EXPECT_THAT(ParseTransferMetadata(std::string("\xff\xff\xff\xff", 4)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("4 bytes are not a serialized tandem.v1.TransferMetadata")));
  // Valid protobuf, wrong content: no layout.
  EXPECT_THAT(ParseTransferMetadata(""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("layout is missing")));
}

}  // namespace
}  // namespace tandem::testing
