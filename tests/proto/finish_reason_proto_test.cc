#include "proto/convert/finish_reason_proto.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tandem/v1/decode.pb.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;

TEST(FinishReasonProtoTest, EveryReasonRoundTrips) {
  for (FinishReason r : {FinishReason::kStop, FinishReason::kLength, FinishReason::kCancelled,
                         FinishReason::kError}) {
    const v1::FinishReason p = ToProto(r);
    EXPECT_NE(p, v1::FINISH_REASON_UNSPECIFIED) << FinishReasonName(r);
    const absl::StatusOr<FinishReason> back = FromProto(p);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, r);
  }
  EXPECT_EQ(ToProto(FinishReason::kStop), v1::FINISH_REASON_STOP);
  EXPECT_EQ(ToProto(FinishReason::kLength), v1::FINISH_REASON_LENGTH);
}

TEST(FinishReasonProtoTest, UnsetOrUnknownIsRejected) {
  EXPECT_THAT(FromProto(v1::FINISH_REASON_UNSPECIFIED).status().message(),
              HasSubstr("finish reason 0 (unspecified"));
  EXPECT_EQ(FromProto(static_cast<v1::FinishReason>(42)).status().code(),
            absl::StatusCode::kInvalidArgument);
  // An unset field on the wire reads as UNSPECIFIED, so a finish from a node that never set it
  // cannot pass for "stop" or "length".
  v1::DecodeFinish finish;
  EXPECT_FALSE(FromProto(finish.reason()).ok());
}

TEST(FinishReasonProtoTest, NamesAreWhatClientsRead) {
  EXPECT_EQ(FinishReasonName(FinishReason::kStop), "stop");
  EXPECT_EQ(FinishReasonName(FinishReason::kLength), "length");
  EXPECT_EQ(FinishReasonName(FinishReason::kCancelled), "cancelled");
  EXPECT_EQ(FinishReasonName(FinishReason::kError), "error");
}

}  // namespace
}  // namespace tandem
