#include "proto/convert/sampling_proto.h"

#include "gtest/gtest.h"

namespace tandem {
namespace {

TEST(SamplingProtoTest, UnsetTopPIsOne) {
  v1::SamplingParams p;
  p.set_temperature(0.7f);
  p.set_top_k(40);
  p.set_seed(9);
  const SamplingParams s = FromProto(p);
  EXPECT_EQ(s.temperature, 0.7f);
  EXPECT_EQ(s.top_k, 40);
  EXPECT_EQ(s.top_p, 1.f);
  EXPECT_EQ(s.seed, 9u);
  EXPECT_TRUE(ValidateSamplingParams(s).ok());
}

// The --top_p contract: (0, 1] everywhere. An explicit 0 is carried as 0 (proto presence tells
// it from unset) and then rejected, instead of silently meaning "no restriction".
TEST(SamplingProtoTest, ExplicitZeroTopPIsKeptAndRejected) {
  v1::SamplingParams p;
  p.set_top_p(0.f);
  ASSERT_TRUE(p.has_top_p());
  const SamplingParams s = FromProto(p);
  EXPECT_EQ(s.top_p, 0.f);
  EXPECT_EQ(ValidateSamplingParams(s).message(), "top_p must be in (0, 1] (got 0)");
  // And it survives serialisation (a proto3 scalar without presence would drop it).
  v1::SamplingParams wire;
  ASSERT_TRUE(wire.ParseFromString(p.SerializeAsString()));
  EXPECT_TRUE(wire.has_top_p());
  EXPECT_EQ(FromProto(wire).top_p, 0.f);
}

TEST(SamplingProtoTest, ToProtoSetsEveryField) {
  const v1::SamplingParams p = ToProto(SamplingParams{0.5f, 3, 0.25f, 11});
  EXPECT_EQ(p.temperature(), 0.5f);
  EXPECT_EQ(p.top_k(), 3);
  ASSERT_TRUE(p.has_top_p());
  EXPECT_EQ(p.top_p(), 0.25f);
  EXPECT_EQ(p.seed(), 11u);
  const SamplingParams back = FromProto(p);
  EXPECT_EQ(back.top_p, 0.25f);
}

TEST(SamplingProtoTest, UnsetPenaltyAndLogprobsAreOff) {
  const SamplingParams s = FromProto(v1::SamplingParams());
  EXPECT_EQ(s.repetition_penalty, 1.f);
  EXPECT_EQ(s.logprobs, -1);
  EXPECT_FALSE(UsesPenalties(s));
  v1::SamplingParams zero;
  zero.set_repetition_penalty(0.f);
  EXPECT_EQ(ValidateSamplingParams(FromProto(zero)).code(), absl::StatusCode::kInvalidArgument);
}

TEST(SamplingProtoTest, EveryFieldSurvivesTheWire) {
  SamplingParams s;
  s.temperature = 0.9f;
  s.top_k = 5;
  s.top_p = 0.8f;
  s.seed = 123;
  s.min_p = 0.1f;
  s.repetition_penalty = 1.2f;
  s.presence_penalty = -0.5f;
  s.frequency_penalty = 0.75f;
  s.logit_bias = {{3, -100.f}, {17, 2.5f}, {40, 100.f}};
  s.min_tokens = 6;
  s.min_tokens_stop_ids = {2, 0};
  s.logprobs = 0;
  s.grammar = "root ::= \"yes\" | \"no\"";
  v1::SamplingParams wire;
  ASSERT_TRUE(wire.ParseFromString(ToProto(s).SerializeAsString()));
  EXPECT_EQ(FromProto(wire), s);
  s.logprobs = -1;
  ASSERT_TRUE(wire.ParseFromString(ToProto(s).SerializeAsString()));
  EXPECT_FALSE(wire.has_logprobs());
  EXPECT_EQ(FromProto(wire), s);
}

}  // namespace
}  // namespace tandem
