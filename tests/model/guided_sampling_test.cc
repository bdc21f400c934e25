// model/guided_sampling.h: draws under a grammar on a tiny hand-made vocabulary — the greedy lazy
// path (exact, mask only on rejection), the sampled path (the masked distribution), stop ids only
// where the grammar is complete, and the replay a resumed request starts from.
#include "model/guided_sampling.h"

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/grammar/compiled_grammar.h"
#include "model/grammar/vocabulary.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;

// 0 "<eos>" (special), 1 "a", 2 "b", 3 "ab", 4 "c", 5 "x".
constexpr int32_t kEos = 0;
constexpr int32_t kA = 1, kB = 2, kAB = 3, kC = 4, kX = 5;

std::shared_ptr<const CompiledGrammar> Grammar(const std::string& gbnf) {
  absl::StatusOr<Vocabulary> vocab = Vocabulary::FromTokenBytes(
      {"<eos>", "a", "b", "ab", "c", "x"}, {true, false, false, false, false, false});
  EXPECT_TRUE(vocab.ok()) << vocab.status();
  auto g = CompileGrammar(gbnf, *vocab);
  EXPECT_TRUE(g.ok()) << g.status();
  return *g;
}

GuidedDecoder Decoder(const std::string& gbnf, std::vector<int32_t> generated = {}) {
  auto d = GuidedDecoder::Create(Grammar(gbnf), generated, {kEos});
  EXPECT_TRUE(d.ok()) << d.status();
  return *std::move(d);
}

TEST(GuidedSamplingTest, GreedyTakesTheArgmaxWhenAllowedAndMasksOnlyOnRejection) {
  GuidedDecoder d = Decoder(R"(root ::= "a" "b"* "c")");
  const SamplingParams greedy;  // temperature 0
  // "a" is the argmax and allowed: no mask computed.
  EXPECT_EQ(d.Sample({0.f, 5.f, 1.f, 2.f, 0.f, 0.f}, greedy, 0), kA);
  EXPECT_EQ(d.stats().full_masks, 0);
  ASSERT_TRUE(d.Accept(kA).ok());
  // "x" (9) and eos (8) are refused: the best allowed token, "c" (3) over "b" (2); "ab" not
  // allowed after "a".
  EXPECT_EQ(d.Sample({8.f, 1.f, 2.f, 7.f, 3.f, 9.f}, greedy, 1), kC);
  EXPECT_EQ(d.stats().full_masks, 1);
  ASSERT_TRUE(d.Accept(kC).ok());
  EXPECT_TRUE(d.IsTerminated());
}

TEST(GuidedSamplingTest, StopIdsOnlyWhereTheGrammarIsComplete) {
  GuidedDecoder d = Decoder(R"(root ::= "a"+)");
  const SamplingParams greedy;
  EXPECT_FALSE(d.IsAllowed(kEos));
  EXPECT_EQ(d.Sample({9.f, 1.f, 0.f, 0.f, 0.f, 0.f}, greedy, 0), kA);
  ASSERT_TRUE(d.Accept(kA).ok());
  EXPECT_TRUE(d.CanTerminate());
  EXPECT_FALSE(d.IsTerminated());
  EXPECT_TRUE(d.IsAllowed(kEos));
  EXPECT_EQ(d.Sample({9.f, 1.f, 0.f, 0.f, 0.f, 0.f}, greedy, 1), kEos);
  EXPECT_TRUE(d.Accept(kEos).ok());  // a stop id changes nothing
  EXPECT_TRUE(d.CanTerminate());
}

// A sampled draw is from the masked distribution: softmax over the allowed tokens only.
TEST(GuidedSamplingTest, SampledDrawsFollowTheMaskedDistribution) {
  GuidedDecoder d = Decoder(R"(root ::= ("a" | "b" | "c") "x")");
  SamplingParams s;
  s.temperature = 1.f;
  s.seed = 7;
  const std::vector<float> logits = {3.f, 1.f, 0.f, 4.f, -1.f, 5.f};
  std::map<int32_t, int> counts;
  const int n = 6000;
  for (int step = 0; step < n; ++step) ++counts[d.Sample(logits, s, step)];
  EXPECT_EQ(counts.size(), 3u);  // only a, b, c
  const double z = std::exp(1.0) + std::exp(0.0) + std::exp(-1.0);
  EXPECT_NEAR(counts[kA] / double(n), std::exp(1.0) / z, 0.02);
  EXPECT_NEAR(counts[kB] / double(n), std::exp(0.0) / z, 0.02);
  EXPECT_NEAR(counts[kC] / double(n), std::exp(-1.0) / z, 0.02);
  EXPECT_EQ(d.stats().full_masks, n);
  // top_k 1 after the mask: always the best allowed token.
  s.top_k = 1;
  EXPECT_EQ(d.Sample(logits, s, 0), kA);
}

TEST(GuidedSamplingTest, ReplayRestoresTheStateAndRefusesForeignTokens) {
  GuidedDecoder d = Decoder(R"(root ::= "ab" "c" "x")", {kAB, kC});
  EXPECT_EQ(d.Sample({0.f, 9.f, 9.f, 9.f, 9.f, 1.f}, SamplingParams{}, 2), kX);
  // Tokens split differently spell the same bytes: "a" then "b" replays like "ab".
  GuidedDecoder split = Decoder(R"(root ::= "ab" "c" "x")", {kA, kB, kC});
  EXPECT_TRUE(split.IsAllowed(kX));
  auto bad = GuidedDecoder::Create(Grammar(R"(root ::= "ab" "c")"), {kAB, kX}, {kEos});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("generated token 1"));
  auto stop = GuidedDecoder::Create(Grammar(R"(root ::= "ab")"), {kEos}, {kEos});
  EXPECT_EQ(stop.status().code(), absl::StatusCode::kInvalidArgument);
}

// min_tokens still suppresses the stop ids the grammar allows: the draw takes the grammar's
// other continuation, never a token it refuses.
TEST(GuidedSamplingTest, MinTokensKeepsTheStopIdOutWhileTheGrammarOffersMore) {
  GuidedDecoder done = Decoder(R"(root ::= "a")", {kA});
  EXPECT_TRUE(done.IsTerminated());
  GuidedDecoder open = Decoder(R"(root ::= "a" "b"?)", {kA});
  SamplingParams s;
  s.min_tokens = 5;
  s.min_tokens_stop_ids = {kEos};
  const int32_t t = open.Sample({9.f, 8.f, 1.f, 7.f, 6.f, 5.f}, s, 1);
  EXPECT_EQ(t, kB);
}

}  // namespace
}  // namespace tandem
