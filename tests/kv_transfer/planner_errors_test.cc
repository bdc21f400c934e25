// CheckKvCompatible and PlanKvTransfer input errors: the specific code and message.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kv_transfer/planner.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

KvLayout Layout(int32_t tp, int32_t dcp, int32_t B, int32_t I, int32_t hkv = 2) {
  return KvLayout{ParallelConfig{tp, 1, dcp, B, I}, ModelDims{2, 8 * hkv, hkv, 4}, KvDType::kF32};
}

TEST(KvCompatibleTest, OnlyParallelLayoutDiffersIsCompatible) {
  KvLayout src = Layout(2, 1, 16, 1);
  src.parallel.pcp = 2;
  src.parallel.dcp = 2;
  EXPECT_TRUE(CheckKvCompatible(src, Layout(1, 1, 8, 8)).ok());
}

TEST(KvCompatibleTest, MismatchedFieldsAreFailedPreconditionNamingFieldAndValues) {
  const KvLayout base = Layout(1, 1, 16, 1, 8);
  KvLayout dst = Layout(1, 1, 16, 1, 4);
  absl::Status s = CheckKvCompatible(base, dst);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "incompatible KV caches: num_kv_heads differs (source 8, destination 4)");

  dst = base;
  dst.dims.num_layers = 3;
  s = CheckKvCompatible(base, dst);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "incompatible KV caches: num_layers differs (source 2, destination 3)");

  dst = base;
  dst.dims.head_dim = 64;
  s = CheckKvCompatible(base, dst);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "incompatible KV caches: head_dim differs (source 4, destination 64)");

  dst = base;
  dst.dtype = KvDType::kBF16;
  s = CheckKvCompatible(base, dst);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "incompatible KV caches: KV dtype differs (source f32, destination bf16)");
}

TEST(KvCompatibleTest, InvalidLayoutsAreInvalidArgumentNamingTheSide) {
  // tp = 3 does not divide Hkv = 2.
  absl::Status s = CheckKvCompatible(Layout(3, 1, 16, 1), Layout(1, 1, 16, 1));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              StartsWith("source layout (tp=3 pcp=1 dcp=1 B=16 I=1): tp must divide"));

  // Interleave 4 does not divide block size 6.
  s = CheckKvCompatible(Layout(1, 1, 16, 1), Layout(1, 1, 6, 4));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              StartsWith("destination layout (tp=1 pcp=1 dcp=1 B=6 I=4): "));
  EXPECT_THAT(std::string(s.message()), HasSubstr("block_size % interleave must be 0"));

  KvLayout bad = Layout(1, 1, 16, 1);
  bad.dtype = static_cast<KvDType>(9);
  s = CheckKvCompatible(Layout(1, 1, 16, 1), bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "destination layout: unknown KV dtype value 9");

  // A block of 2^30 layers · 2 · 16 · 2^30 dims overflows int64 bytes.
  bad = Layout(1, 1, 16, 1);
  bad.dims.num_layers = 1 << 30;
  bad.dims.head_dim = 1 << 30;
  s = CheckKvCompatible(bad, bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "source layout: one KV block does not fit in int64 bytes");
}

TEST(PlanKvTransferErrorsTest, IncompatiblePairIsRejectedBeforeLookingAtTables) {
  const absl::StatusOr<TransferPlan> plan =
      PlanKvTransfer(Layout(1, 1, 16, 1, 8), {}, Layout(1, 1, 16, 1, 4), {}, 100);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(plan.status().message()), HasSubstr("num_kv_heads"));
}

TEST(PlanKvTransferErrorsTest, NegativeTokenCount) {
  const KvLayout l = Layout(1, 1, 16, 1);
  const absl::StatusOr<TransferPlan> plan = PlanKvTransfer(l, {}, l, {}, -1);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(plan.status().message(), "num_tokens must be >= 0 (got -1)");
}

TEST(PlanKvTransferErrorsTest, TablesTooShort) {
  // Source: tp2 with Hkv = 1 and dcp2, B = 4: 8 tokens per virtual block, 17 tokens need 3.
  const KvLayout src = Layout(2, 2, 4, 1, 1);
  const KvLayout dst = Layout(1, 1, 16, 1, 1);
  absl::StatusOr<TransferPlan> plan = PlanKvTransfer(src, {{0, 1}}, dst, {{0, 1}}, 17);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(plan.status().message(),
            "source block table has 2 blocks but 17 tokens need 3 (8 tokens per virtual block)");
  plan = PlanKvTransfer(src, {{0, 1, 2}}, dst, {{0}}, 17);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(plan.status().message(),
            "destination block table has 1 blocks but 17 tokens need 2 (16 tokens per virtual "
            "block)");
}

TEST(PlanKvTransferErrorsTest, NegativeAndRepeatedBlockIds) {
  const KvLayout l = Layout(1, 1, 4, 1);
  absl::StatusOr<TransferPlan> plan = PlanKvTransfer(l, {{0, 1}}, l, {{0, -3}}, 8);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(plan.status().message(), "destination block table entry 1 is negative (-3)");

  plan = PlanKvTransfer(l, {{4, 2, 4}}, l, {{0, 1, 2}}, 12);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(plan.status().message(),
            "block id 4 appears more than once in the first 3 entries of the source block table");

  // Entries past the ones the tokens need are not looked at.
  plan = PlanKvTransfer(l, {{0, 1, 1, -1}}, l, {{0, 1, 0}}, 8);
  EXPECT_TRUE(plan.ok()) << plan.status();
}

TEST(PlanKvTransferErrorsTest, BlockIdsBeyondInt64Offsets) {
  // One block = 2 heads · 1024 layers · 2 · 1024 slots · 1024 dims · 4 bytes = 2^35 bytes, so
  // block id 2^31 − 1 would start past 2^63.
  KvLayout l = Layout(1, 1, 1024, 1);
  l.dims.num_layers = 1024;
  l.dims.head_dim = 1024;
  const int32_t huge = std::numeric_limits<int32_t>::max();
  const absl::StatusOr<TransferPlan> plan = PlanKvTransfer(l, {{huge}}, l, {{0}}, 1);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(plan.status().message(),
            "source block id 2147483647 puts KV bytes beyond int64 offsets");
}

}  // namespace
}  // namespace tandem
