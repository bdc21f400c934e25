// CollectiveDType (engine/collective_dtype.h): which element type each of the forward's
// collectives moves, for f32 and bf16 activations.
#include "engine/collective_dtype.h"

#include "gtest/gtest.h"

namespace tandem {
namespace {

struct Row {
  Collective collective;
  CommDType f32;
  CommDType bf16;
};

TEST(CollectiveDTypeTest, ActivationsFollowTheBackendLseAndLogitsStayF32) {
  const Row table[] = {
      {Collective::kTpResidualAllReduce, CommDType::kF32, CommDType::kBF16},
      {Collective::kPcpKvAllGather, CommDType::kF32, CommDType::kBF16},
      {Collective::kPcpHiddenAllGather, CommDType::kF32, CommDType::kBF16},
      {Collective::kDcpQueryAllGather, CommDType::kF32, CommDType::kBF16},
      {Collective::kDcpOutputReduceScatter, CommDType::kF32, CommDType::kBF16},
      {Collective::kDcpLseAllGather, CommDType::kF32, CommDType::kF32},
      {Collective::kTpLogitsAllGather, CommDType::kF32, CommDType::kF32},
  };
  for (const Row& r : table) {
    EXPECT_EQ(CollectiveDType(r.collective, ActivationDType::kF32), r.f32)
        << static_cast<int>(r.collective);
    EXPECT_EQ(CollectiveDType(r.collective, ActivationDType::kBF16), r.bf16)
        << static_cast<int>(r.collective);
  }
  // A constant expression: the choice is made from the two enums alone.
  static_assert(CollectiveDType(Collective::kTpResidualAllReduce, ActivationDType::kBF16) ==
                CommDType::kBF16);
  static_assert(
      CommDTypeBytes(CollectiveDType(Collective::kDcpLseAllGather, ActivationDType::kBF16)) == 4);
}

}  // namespace
}  // namespace tandem
