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

}  // namespace
}  // namespace tandem
