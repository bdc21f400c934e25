// Unit tests of TransferMetadata <-> tandem.v1.TransferMetadata (no UCX involved).
#include "kv_transfer/ucx/metadata_proto.h"

#include <string>

#include "attention/parallel_layout.h"
#include "common/fnv1a.h"
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
    // md 0 with a 2-byte key, then the system device "unknown" UCX 1.20+ packs for host memory
    // (transfer_checks.h: a trailing byte older UCX never reads).
    const std::string rkey = {'\x01', 0, 0, 0, 0, 0, 0, 0, 0, 2, static_cast<char>(r), 'k', '\xff'};
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
    EXPECT_EQ(a.ranks[r].memory_type, b.ranks[r].memory_type);
  }
}

// The checksum as kv_transfer.proto specifies it, written out independently of the code under
// test: fields 1-4, then field 9 only when it is not POOL_MEMORY_HOST.
uint64_t SpecChecksum(const v1::RankTransferInfo& in) {
  std::string enc;
  auto le = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i) enc.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  le(in.worker_address().size());
  enc += in.worker_address();
  le(in.pool_base());
  le(static_cast<uint64_t>(in.pool_bytes()));
  le(in.rkey().size());
  enc += in.rkey();
  if (in.memory_type() != v1::POOL_MEMORY_HOST) le(static_cast<uint64_t>(in.memory_type()));
  return Fnv1a64(enc);
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

TEST(MetadataProtoTest, MemoryTypeTravelsAndIsChecksummed) {
  TransferMetadata m = Metadata();
  m.ranks[1].memory_type = KvMemoryType::kCuda;
  const v1::TransferMetadata p = ToProto(m);
  EXPECT_EQ(p.ranks(0).memory_type(), v1::POOL_MEMORY_HOST);
  EXPECT_EQ(p.ranks(1).memory_type(), v1::POOL_MEMORY_CUDA);
  for (int r = 0; r < p.ranks_size(); ++r) {
    // Host entries hash exactly as before memory types existed (older peers keep agreeing).
    EXPECT_EQ(p.ranks(r).checksum(), SpecChecksum(p.ranks(r))) << "rank " << r;
  }
  absl::StatusOr<TransferMetadata> back = ParseTransferMetadata(p.SerializeAsString());
  ASSERT_OK(back);
  ExpectSame(m, *back);

  // A device pool passed off as host memory (which a puller would read with loads), or the
  // other way round, fails the checksum.
  v1::TransferMetadata q = p;
  q.mutable_ranks(1)->set_memory_type(v1::POOL_MEMORY_HOST);
  EXPECT_THAT(FromProto(q), StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("ranks[1].checksum does not match")));
  q = p;
  q.mutable_ranks(0)->set_memory_type(v1::POOL_MEMORY_CUDA);
  EXPECT_THAT(FromProto(q), StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("ranks[0].checksum does not match")));
  // A memory type from a newer build, consistently checksummed, is refused by name.
  q = p;
  q.mutable_ranks(2)->set_memory_type(static_cast<v1::PoolMemoryType>(7));
  q.mutable_ranks(2)->set_checksum(SpecChecksum(q.ranks(2)));
  EXPECT_THAT(FromProto(q), StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("ranks[2].memory_type 7 is not a memory type")));
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
