// ToGrpcStatus / FromGrpcStatus: codes and messages map 1:1 and absl payloads (the KV source a
// failure blames) survive the round trip through the gRPC status details; details that are not
// ours are ignored.
#include "serving/grpc_status.h"

#include "common/kv_source_failure.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

using ::testing::ElementsAre;

TEST(GrpcStatusTest, CodeAndMessageRoundTrip) {
  const grpc::Status g = ToGrpcStatus(absl::ResourceExhaustedError("no blocks"));
  EXPECT_EQ(g.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(g.error_message(), "no blocks");
  EXPECT_EQ(g.error_details(), "");
  EXPECT_EQ(FromGrpcStatus(g), absl::ResourceExhaustedError("no blocks"));
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
}

TEST(GrpcStatusTest, BlameSurvivesTheRoundTrip) {
  const absl::Status blamed = BlameKvSource(absl::UnavailableError("peer reset"),
                                            {"10.0.0.1:5000", "prefill-a", {3, 1, 3}});
  const absl::Status back = FromGrpcStatus(ToGrpcStatus(blamed));
  EXPECT_EQ(back.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(back.message(), "peer reset");
  const std::optional<KvSourceFailure> source = KvSourceFailureOf(back);
  ASSERT_TRUE(source.has_value());
  EXPECT_EQ(source->prefill_address, "10.0.0.1:5000");
  EXPECT_EQ(source->engine_id, "prefill-a");
  EXPECT_THAT(source->ranks, ElementsAre(1, 3));  // ascending, each once
}

TEST(GrpcStatusTest, ForeignOrBrokenDetailsAreIgnored) {
  for (const char* details : {"\x08\x0e\x12\x03xyz", "[1,2]", "{\"u\": 3}", "{"}) {
    const absl::Status s =
        FromGrpcStatus(grpc::Status(grpc::StatusCode::UNAVAILABLE, "down", details));
    EXPECT_EQ(s, absl::UnavailableError("down")) << details;
    EXPECT_FALSE(KvSourceFailureOf(s).has_value());
  }
}

TEST(KvSourceFailureTest, OkStaysOkAndMalformedPayloadsDecodeToNothing) {
  EXPECT_TRUE(BlameKvSource(absl::OkStatus(), {"a", "b", {}}).ok());
  absl::Status s = absl::UnavailableError("x");
  s.SetPayload(kKvSourceFailureUrl, absl::Cord("{\"prefill_address\": 1}"));
  EXPECT_FALSE(KvSourceFailureOf(s).has_value());
  EXPECT_FALSE(KvSourceFailureOf(absl::UnavailableError("x")).has_value());
}

}  // namespace
}  // namespace tandem
