#include "proto/convert/kv_layout_proto.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;

KvLayout Layout() {
  KvLayout l;
  l.parallel = ParallelConfig{/*tp=*/4, /*pcp=*/2, /*dcp=*/2, /*block_size=*/16, /*interleave=*/4};
  l.dims = ModelDims{/*num_layers=*/3, /*num_q_heads=*/8, /*num_kv_heads=*/2, /*head_dim=*/16};
  l.dtype = KvDType::kBF16;
  return l;
}

void ExpectInvalid(const v1::KvLayout& p, InstanceRole role, const std::string& what) {
  const absl::StatusOr<KvLayout> l = FromProto(p, role);
  ASSERT_FALSE(l.ok()) << what;
  EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(l.status().message(), HasSubstr(what));
}

TEST(KvLayoutProtoTest, RoundTripsEveryField) {
  for (KvDType dtype : {KvDType::kF32, KvDType::kF16, KvDType::kBF16}) {
    KvLayout in = Layout();
    in.dtype = dtype;
    const v1::KvLayout p = ToProto(in);
    EXPECT_EQ(p.parallel().tp(), 4);
    EXPECT_EQ(p.parallel().pcp(), 2);
    EXPECT_EQ(p.parallel().dcp(), 2);
    EXPECT_EQ(p.parallel().block_size(), 16);
    EXPECT_EQ(p.parallel().interleave(), 4);
    EXPECT_EQ(p.dims().num_layers(), 3);
    EXPECT_EQ(p.dims().num_q_heads(), 8);
    EXPECT_EQ(p.dims().num_kv_heads(), 2);
    EXPECT_EQ(p.dims().head_dim(), 16);
    const absl::StatusOr<KvLayout> out = FromProto(p, InstanceRole::kPrefill);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(out->parallel.ToString(), in.parallel.ToString());
    EXPECT_EQ(out->dims.num_layers, 3);
    EXPECT_EQ(out->dims.num_q_heads, 8);
    EXPECT_EQ(out->dims.num_kv_heads, 2);
    EXPECT_EQ(out->dims.head_dim, 16);
    EXPECT_EQ(out->dtype, dtype);
  }
  EXPECT_EQ(ToProto(Layout()).dtype(), v1::KV_DTYPE_BF16);
}

TEST(KvLayoutProtoTest, RejectsMissingPartsAndUnknownDType) {
  v1::KvLayout p = ToProto(Layout());
  p.clear_parallel();
  ExpectInvalid(p, InstanceRole::kPrefill, "layout.parallel is missing");
  p = ToProto(Layout());
  p.clear_dims();
  ExpectInvalid(p, InstanceRole::kPrefill, "layout.dims is missing");
  p = ToProto(Layout());
  p.set_dtype(static_cast<v1::KvDType>(7));
  ExpectInvalid(p, InstanceRole::kPrefill, "layout.dtype has unknown value 7");
  ExpectInvalid(v1::KvLayout(), InstanceRole::kPrefill, "layout.parallel is missing");
}

TEST(KvLayoutProtoTest, RejectsLayoutsNoInstanceCouldHave) {
  v1::KvLayout p = ToProto(Layout());
  p.mutable_parallel()->set_tp(0);
  ExpectInvalid(p, InstanceRole::kPrefill, "layout: tp must be >= 1 (got 0)");
  p = ToProto(Layout());
  p.mutable_parallel()->set_block_size(0);
  ExpectInvalid(p, InstanceRole::kPrefill, "layout: block_size must be >= 1");
  p = ToProto(Layout());
  p.mutable_dims()->set_head_dim(0);
  ExpectInvalid(p, InstanceRole::kPrefill, "layout: model dimensions must be positive");
  p = ToProto(Layout());
  p.mutable_parallel()->set_tp(3);  // does not divide 8 query heads
  ExpectInvalid(p, InstanceRole::kPrefill, "layout: tp must divide the number of query heads");
  // pcp is prefill-only: the same message is valid from a prefill and invalid as a decode layout.
  EXPECT_TRUE(FromProto(ToProto(Layout()), InstanceRole::kPrefill).ok());
  ExpectInvalid(ToProto(Layout()), InstanceRole::kDecode, "layout: pcp must be 1 on a decode");
}

}  // namespace
}  // namespace tandem
