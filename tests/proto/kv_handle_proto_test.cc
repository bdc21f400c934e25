// proto/convert/kv_handle_proto.h: a KvHandle survives the wire field by field (the lease expiry
// to the millisecond), and a handle with an invalid layout is refused.
#include "proto/convert/kv_handle_proto.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

KvHandle Handle() {
  KvHandle kv;
  kv.engine_id = "prefill-a";
  kv.epoch = 3;
  kv.request_id = "req-1#2";
  kv.block_table = {4, 9, 2};
  kv.num_tokens = 37;
  kv.layout.parallel = ParallelConfig{/*tp=*/2, /*pcp=*/2, /*dcp=*/1, /*block_size=*/16,
                                      /*interleave=*/1};
  kv.layout.dims = ModelDims{/*num_layers=*/3, /*num_q_heads=*/8, /*num_kv_heads=*/2,
                             /*head_dim=*/16};
  kv.layout.dtype = KvDType::kF16;
  kv.lease_expiry = absl::FromUnixMillis(1764560000123);
  kv.generation = 7;
  kv.prefill_address = "10.0.0.5:7001";
  kv.block_generations = {1, 1, 2};
  kv.kv_digests = {0xdeadbeefu, 0x12345678u, 0u};
  return kv;
}

TEST(KvHandleProtoTest, RoundTripsEveryField) {
  const KvHandle in = Handle();
  const v1::KvHandle p = ToProto(in);
  EXPECT_EQ(p.lease_expiry_unix_ms(), 1764560000123);
  const absl::StatusOr<KvHandle> out = KvHandleFromProto(p);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->engine_id, in.engine_id);
  EXPECT_EQ(out->epoch, in.epoch);
  EXPECT_EQ(out->request_id, in.request_id);
  EXPECT_EQ(out->block_table, in.block_table);
  EXPECT_EQ(out->num_tokens, in.num_tokens);
  EXPECT_EQ(out->layout, in.layout);
  EXPECT_EQ(out->lease_expiry, in.lease_expiry);
  EXPECT_EQ(out->generation, in.generation);
  EXPECT_EQ(out->prefill_address, in.prefill_address);
  EXPECT_EQ(out->block_generations, in.block_generations);
  EXPECT_EQ(out->kv_digests, in.kv_digests);
}

TEST(KvHandleProtoTest, RefusesAHandleWithAnInvalidLayout) {
  KvHandle in = Handle();
  in.layout.parallel.block_size = 0;
  const absl::StatusOr<KvHandle> out = KvHandleFromProto(ToProto(in));
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(out.status().message()), ::testing::StartsWith("layout"));
}

}  // namespace
}  // namespace tandem
