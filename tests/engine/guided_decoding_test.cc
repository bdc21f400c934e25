// Grammar-constrained decoding through the engines (issue 25): PrefillEngine samples the first
// token under the grammar, DecodeEngine the rest; a request stops when the grammar is complete;
// a request resumed after k tokens (prefill of prompt + k - 1 generated tokens, decode from the
// k-th) continues exactly as the uninterrupted one, its matcher replayed. On the small random
// model, whose unconstrained argmax is almost never a digit, so the mask does the work.
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "engine/combined_engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/grammar/vocabulary.h"
#include "tests/engine/test_model.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

constexpr int32_t kEos = 0;
constexpr char kGrammar[] = R"(root ::= [0-9]{1,3} "-" [0-9]{2})";

const LlamaWeights& Weights() {
  static const LlamaWeights* w =
      new LlamaWeights(testing::RandomWeights(testing::SmallConfig(), 17));
  return *w;
}

// 0 <eos> (special); 1..10 "0".."9"; 11 "-"; 12 "-1"; 13 "12"; 14 "345"; the rest letters.
std::vector<std::string> TokenBytes() {
  std::vector<std::string> bytes = {"<eos>"};
  for (char d = '0'; d <= '9'; ++d) bytes.emplace_back(1, d);
  for (const char* t : {"-", "-1", "12", "345"}) bytes.emplace_back(t);
  while (bytes.size() < 320) bytes.push_back(absl::StrCat("w", bytes.size()));
  return bytes;
}

std::shared_ptr<GrammarCache> Grammars() {
  std::vector<bool> never(320, false);
  never[kEos] = true;
  absl::StatusOr<Vocabulary> vocab = Vocabulary::FromTokenBytes(TokenBytes(), never);
  EXPECT_TRUE(vocab.ok()) << vocab.status();
  return std::make_shared<GrammarCache>(*std::move(vocab));
}

std::unique_ptr<Instance> MakeInstance() {
  InstanceOptions o;
  o.parallel.block_size = 4;
  o.kv_bytes_per_rank = int64_t{1} << 20;
  auto inst = Instance::Create(Weights(), o);
  EXPECT_TRUE(inst.ok()) << inst.status();
  return std::move(inst).value();
}

std::string Text(const std::vector<int32_t>& tokens) {
  const std::vector<std::string> bytes = TokenBytes();
  std::string text;
  for (const int32_t t : tokens) text += bytes[t];
  return text;
}

GenerateRequest Request(uint64_t seed, float temperature) {
  std::mt19937_64 rng(seed);
  GenerateRequest req;
  for (int i = 0; i < 7; ++i) req.prompt.push_back(static_cast<int32_t>(rng() % 300));
  req.max_new_tokens = 12;
  req.stop_ids = {kEos};
  req.sampling.temperature = temperature;
  req.sampling.seed = seed;
  req.sampling.grammar = kGrammar;
  req.sampling.min_tokens_stop_ids = req.stop_ids;  // as the router sets them
  return req;
}

TEST(GuidedDecodingTest, EveryOutputMatchesAndStopsWhenTheGrammarIsComplete) {
  auto inst = MakeInstance();
  PrefillOptions po;
  DecodeOptions dopt;
  po.grammars = dopt.grammars = Grammars();
  CombinedEngine engine(inst.get(), po, dopt);
  int unconstrained_digits = 0;
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    const float temperature = seed % 3 == 0 ? 0.f : 1.5f;
    absl::StatusOr<GenerateResult> r =
        engine.GenerateBlocking(Request(seed, temperature), absl::Seconds(60));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->reason, FinishReason::kStop) << Text(r->tokens);
    EXPECT_THAT(Text(r->tokens), MatchesRegex("[0-9]{1,3}-[0-9]{2}")) << "seed " << seed;
    GenerateRequest plain = Request(seed, temperature);
    plain.sampling.grammar.clear();
    absl::StatusOr<GenerateResult> p = engine.GenerateBlocking(plain, absl::Seconds(60));
    ASSERT_TRUE(p.ok()) << p.status();
    for (const int32_t t : p->tokens) unconstrained_digits += (t >= 1 && t <= 14) ? 1 : 0;
  }
  // Without the grammar the model seldom writes these tokens: the mask did the work.
  EXPECT_LT(unconstrained_digits, 12 * 12 / 4);
  EXPECT_EQ(engine.blocks().free_blocks(), engine.blocks().total_blocks());
}

TEST(GuidedDecodingTest, AResumedRequestContinuesExactlyWithItsMatcherReplayed) {
  auto inst = MakeInstance();
  std::shared_ptr<GrammarCache> grammars = Grammars();
  for (const float temperature : {0.f, 1.5f}) {
    const GenerateRequest full_req = Request(5, temperature);
    std::vector<int32_t> g;
    {
      PrefillOptions po;
      DecodeOptions dopt;
      po.grammars = dopt.grammars = grammars;
      CombinedEngine engine(inst.get(), po, dopt);
      absl::StatusOr<GenerateResult> r = engine.GenerateBlocking(full_req, absl::Seconds(60));
      ASSERT_TRUE(r.ok()) << r.status();
      g = r->tokens;
    }
    ASSERT_GE(g.size(), 3u) << Text(g);
    BlockManager blocks(inst->num_blocks());
    PrefillOptions po;
    po.grammars = grammars;
    DecodeOptions dopt;
    dopt.grammars = grammars;
    PrefillEngine prefill(inst.get(), &blocks, po);
    DecodeEngine decode(inst.get(), &blocks, dopt);
    const int k = 2;  // g[0], g[1] already streamed; the failed decode owed g[2...]
    PrefillJob pr;
    pr.id = "resume";
    pr.prompt = full_req.prompt;
    pr.prompt.insert(pr.prompt.end(), g.begin(), g.begin() + (k - 1));
    pr.sampling = full_req.sampling;
    pr.sample_step = k - 1;
    pr.reserve_tokens = full_req.max_new_tokens - (k - 1);
    absl::Notification prefilled;
    absl::StatusOr<PrefillResult> result = absl::UnknownError("pending");
    ASSERT_TRUE(prefill
                    .Submit(pr,
                            [&](absl::StatusOr<PrefillResult> r) {
                              result = std::move(r);
                              prefilled.Notify();
                            })
                    .ok());
    ASSERT_TRUE(prefilled.WaitForNotificationWithTimeout(absl::Seconds(60)));
    ASSERT_TRUE(result.ok()) << result.status();
    // The prefill's own draw k-1 under the replayed matcher is the original g[k-1].
    EXPECT_EQ(result->first_token, g[k - 1]);
    DecodeJob dr;
    dr.id = "resume";
    dr.prompt_len = result->num_tokens;
    dr.first_token = g[k - 1];
    dr.block_table = result->block_table;
    dr.sampling = full_req.sampling;
    dr.stop_ids = full_req.stop_ids;
    dr.max_new_tokens = full_req.max_new_tokens - (k - 1);
    dr.next_step = k;
    dr.context = pr.prompt;
    // A grammar needs the context too, and a first token it refuses is an error.
    DecodeJob no_context = dr;
    no_context.context.clear();
    EXPECT_THAT(decode.Add(no_context, DecodeCallbacks{}).message(),
                HasSubstr("a grammar needs the context"));
    DecodeJob foreign = dr;
    foreign.first_token = 300;  // "w300"
    EXPECT_EQ(decode.Add(foreign, DecodeCallbacks{}).code(), absl::StatusCode::kInvalidArgument);
    std::vector<int32_t> rest;
    absl::Notification done;
    FinishReason reason = FinishReason::kError;
    DecodeCallbacks cb;
    cb.on_token = [&](int32_t t) { rest.push_back(t); };
    cb.on_done = [&](absl::Status, FinishReason r, int32_t) {
      reason = r;
      done.Notify();
    };
    ASSERT_TRUE(decode.Add(dr, cb).ok());
    ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(60)));
    EXPECT_EQ(rest, std::vector<int32_t>(g.begin() + k, g.end())) << "temperature " << temperature;
    EXPECT_EQ(reason, FinishReason::kStop);
    EXPECT_EQ(blocks.free_blocks(), blocks.total_blocks());
  }
}

TEST(GuidedDecodingTest, GrammarsAreRefusedWithoutAVocabularyOrWhenTheyDoNotCompile) {
  auto inst = MakeInstance();
  {
    CombinedEngine engine(inst.get(), PrefillOptions{}, DecodeOptions{});
    EXPECT_EQ(engine.GenerateBlocking(Request(1, 0.f), absl::Seconds(60)).status().code(),
              absl::StatusCode::kFailedPrecondition);
  }
  PrefillOptions po;
  DecodeOptions dopt;
  po.grammars = dopt.grammars = Grammars();
  CombinedEngine engine(inst.get(), po, dopt);
  GenerateRequest bad = Request(1, 0.f);
  bad.sampling.grammar = "root ::= missing";
  const absl::Status s = engine.GenerateBlocking(bad, absl::Seconds(60)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("sampling.grammar"));
}

}  // namespace
}  // namespace tandem
