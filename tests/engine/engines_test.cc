// PrefillEngine / DecodeEngine / Instance behaviour on the small random model: validation, KV
// capacity waits, cancellation, stop conditions and continuous batching — and that every path
// returns its blocks.
#include <cstring>
#include <random>

#include "absl/synchronization/notification.h"
#include "common/request_checks.h"
#include "engine/combined_engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/token_history.h"
#include "tests/engine/test_model.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;
using testing::RandomWeights;
using testing::SmallConfig;

const LlamaWeights& Weights() {
  static const LlamaWeights* w = new LlamaWeights(RandomWeights(SmallConfig(), 17));
  return *w;
}

std::unique_ptr<Instance> MakeInstance(int64_t kv_bytes = int64_t{1} << 20) {
  InstanceOptions o;
  o.parallel.block_size = 4;
  o.kv_bytes_per_rank = kv_bytes;
  auto inst = Instance::Create(Weights(), o);
  EXPECT_TRUE(inst.ok()) << inst.status();
  return std::move(inst).value();
}

std::vector<int32_t> Prompt(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> p(n);
  for (int32_t& t : p) t = static_cast<int32_t>(rng() % 300);
  return p;
}

struct PrefillWait {
  absl::Notification done;
  absl::StatusOr<PrefillResult> result = absl::UnknownError("pending");
  PrefillCallback Callback() {
    return [this](absl::StatusOr<PrefillResult> r) {
      result = std::move(r);
      done.Notify();
    };
  }
};

TEST(EnginesTest, InstanceRejectsInvalidLayoutsNamingTheRule) {
  struct Case {
    ParallelConfig p;
    InstanceRole role;
    const char* rule;
  };
  const Case cases[] = {
      {{3, 1, 1, 16, 1}, InstanceRole::kCombined, "tp must divide the number of query heads"},
      {{16, 1, 1, 16, 1}, InstanceRole::kCombined, "tp must divide the number of query heads"},
      {{1, 2, 1, 16, 1}, InstanceRole::kDecode, "pcp must be 1 on a decode instance"},
      {{2, 1, 2, 16, 1}, InstanceRole::kDecode, "would mix KV heads"},
      {{4, 1, 4, 16, 1}, InstanceRole::kCombined, "would mix KV heads"},
      {{8, 1, 3, 16, 1}, InstanceRole::kCombined, "dcp must divide tp*pcp"},
      {{1, 3, 2, 16, 1}, InstanceRole::kPrefill, "dcp must divide tp*pcp"},
      {{1, 1, 1, 16, 3}, InstanceRole::kCombined, "block_size % interleave"},
      {{1, 1, 1, 0, 1}, InstanceRole::kCombined, "block_size must be >= 1"},
      {{0, 1, 1, 16, 1}, InstanceRole::kCombined, "tp must be >= 1"},
      {{1, 0, 1, 16, 1}, InstanceRole::kPrefill, "pcp must be >= 1"},
      {{2, 2, 3, 16, 1}, InstanceRole::kPrefill, "dcp must divide tp*pcp"},
  };
  for (const Case& c : cases) {
    InstanceOptions o;
    o.parallel = c.p;
    o.role = c.role;
    const auto inst = Instance::Create(Weights(), o);
    EXPECT_EQ(inst.status().code(), absl::StatusCode::kInvalidArgument) << c.p.ToString();
    EXPECT_THAT(inst.status().message(), HasSubstr(c.rule)) << c.p.ToString();
  }
  InstanceOptions tiny;
  tiny.kv_bytes_per_rank = 100;
  EXPECT_THAT(Instance::Create(Weights(), tiny).status().message(),
              HasSubstr("smaller than one block"));
}

// Host memory standing in for a transfer pool (what UCX allocates on the nodes).
class VectorPool final : public KvPoolMemory {
 public:
  explicit VectorPool(int64_t bytes) : bytes_(bytes) {}
  void* base() const override { return bytes_.data(); }
  int64_t bytes() const override { return static_cast<int64_t>(bytes_.size()); }

 private:
  mutable std::vector<std::byte> bytes_;
};

TEST(EnginesTest, StagedInstanceCopiesExactlyTheNamedBlocks) {
  InstanceOptions o;
  o.parallel.tp = 2;
  o.parallel.block_size = 4;
  o.kv_bytes_per_rank = int64_t{1} << 20;
  o.kv_staging = KvStaging::kAlways;
  o.pool_allocator = [](int32_t, int64_t bytes) -> absl::StatusOr<std::unique_ptr<KvPoolMemory>> {
    return std::make_unique<VectorPool>(bytes);
  };
  absl::StatusOr<std::unique_ptr<Instance>> inst = Instance::Create(Weights(), o);
  ASSERT_TRUE(inst.ok()) << inst.status();
  Instance& in = **inst;
  ASSERT_TRUE(in.staged());
  const int64_t bb = in.block_bytes();
  ASSERT_GE(in.num_blocks(), 3);
  auto bytes_of = [bb](const KvPoolView& v, int32_t block) {
    return static_cast<std::byte*>(v.base) + block * bb;
  };
  for (int32_t r = 0; r < in.world(); ++r) {
    ASSERT_NE(in.pool(r).base, in.transfer_pool(r).base);
    for (int32_t b = 0; b < 3; ++b) {
      std::memset(bytes_of(in.pool(r), b), 0x10 + 4 * r + b, bb);
      std::memset(bytes_of(in.transfer_pool(r), b), 0, bb);
    }
  }
  ASSERT_TRUE(in.StageOut({2, 0}).ok());
  for (int32_t r = 0; r < in.world(); ++r) {
    for (int32_t b = 0; b < 3; ++b) {
      const std::byte want = b == 1 ? std::byte{0} : static_cast<std::byte>(0x10 + 4 * r + b);
      EXPECT_EQ(*bytes_of(in.transfer_pool(r), b), want) << "rank " << r << " block " << b;
      EXPECT_EQ(*(bytes_of(in.transfer_pool(r), b) + bb - 1), want)
          << "rank " << r << " block " << b;
    }
    std::memset(bytes_of(in.transfer_pool(r), 1), 0x7f, bb);
  }
  ASSERT_TRUE(in.StageIn({1}).ok());
  for (int32_t r = 0; r < in.world(); ++r) {
    EXPECT_EQ(*(bytes_of(in.pool(r), 1) + bb - 1), std::byte{0x7f}) << "rank " << r;
    EXPECT_EQ(*bytes_of(in.pool(r), 0), static_cast<std::byte>(0x10 + 4 * r)) << "rank " << r;
  }
  const absl::Status bad = in.StageOut({in.num_blocks()});
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument) << bad;

  const std::unique_ptr<Instance> plain = MakeInstance();  // no transfer memory: never staged
  EXPECT_FALSE(plain->staged());
  EXPECT_EQ(plain->transfer_pool(0).base, plain->pool(0).base);
  EXPECT_TRUE(plain->StageOut({0}).ok());
}

// n > 1 from one prefill (docs/router.md#n-choices-from-one-prefill): choice c's first token is
// drawn from the same last-position logits with seed + c.
TEST(EnginesTest, PrefillSamplesEachChoicesFirstTokenWithSeedPlusItsIndex) {
  auto inst = MakeInstance();
  BlockManager blocks(inst->num_blocks());
  PrefillEngine prefill(inst.get(), &blocks, PrefillOptions{});
  PrefillJob pr;
  pr.id = "choices";
  pr.prompt = Prompt(10, 3);
  pr.sampling.temperature = 2.f;
  pr.sampling.seed = 50;
  pr.sampling.logprobs = 2;
  pr.return_logits = true;
  pr.choices = 4;
  PrefillWait wait;
  ASSERT_TRUE(prefill.Submit(pr, wait.Callback()).ok());
  ASSERT_TRUE(wait.done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  ASSERT_TRUE(wait.result.ok()) << wait.result.status();
  const PrefillResult& r = *wait.result;
  ASSERT_EQ(r.choice_tokens.size(), 4u);
  ASSERT_EQ(r.choice_logprobs.size(), 4u);
  EXPECT_EQ(r.choice_tokens[0], r.first_token);
  for (int32_t c = 0; c < 4; ++c) {
    SamplingParams own = pr.sampling;
    own.seed = 50 + c;
    EXPECT_EQ(r.choice_tokens[c], SampleToken(r.logits, own, 0)) << c;
    EXPECT_EQ(r.choice_logprobs[c], ComputeLogprobs(r.logits, r.choice_tokens[c], 2)) << c;
  }
  blocks.Release(r.block_table);
  EXPECT_EQ(blocks.free_blocks(), blocks.total_blocks());
  for (const int32_t bad : {0, kMaxChoices + 1}) {
    pr.choices = bad;
    const absl::Status s = prefill.Submit(pr, [](absl::StatusOr<PrefillResult>) {});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  }
}

// The partial last prompt block each further choice gets (engine/choice_blocks.h): whole blocks,
// on every rank.
TEST(EnginesTest, CopyBlocksCopiesWholeBlocksOnEveryRank) {
  InstanceOptions o;
  o.parallel.tp = 2;
  o.parallel.block_size = 4;
  o.kv_bytes_per_rank = int64_t{1} << 20;
  absl::StatusOr<std::unique_ptr<Instance>> inst = Instance::Create(Weights(), o);
  ASSERT_TRUE(inst.ok()) << inst.status();
  Instance& in = **inst;
  const int64_t bb = in.block_bytes();
  auto bytes_of = [bb](const KvPoolView& v, int32_t block) {
    return static_cast<std::byte*>(v.base) + block * bb;
  };
  for (int32_t r = 0; r < in.world(); ++r) {
    for (int32_t b = 0; b < 4; ++b) std::memset(bytes_of(in.pool(r), b), 0x20 + 4 * r + b, bb);
  }
  ASSERT_TRUE(in.CopyBlocks({{1, 3}, {0, 2}}).ok());
  for (int32_t r = 0; r < in.world(); ++r) {
    for (const auto& [src, dst] : {std::pair{1, 3}, std::pair{0, 2}}) {
      EXPECT_EQ(std::memcmp(bytes_of(in.pool(r), src), bytes_of(in.pool(r), dst), bb), 0)
          << "rank " << r << " block " << dst;
    }
    EXPECT_EQ(*bytes_of(in.pool(r), 1), static_cast<std::byte>(0x20 + 4 * r + 1));
  }
  EXPECT_EQ(in.CopyBlocks({{0, in.num_blocks()}}).code(), absl::StatusCode::kInvalidArgument);
}

TEST(EnginesTest, PrefillRejectsRequestsThatCanNeverRun) {
  auto inst = MakeInstance(int64_t{64} << 10);  // 64 KiB: 32 blocks of 4 tokens
  BlockManager blocks(inst->num_blocks());
  PrefillEngine engine(inst.get(), &blocks, PrefillOptions{});
  PrefillWait w;
  EXPECT_THAT(engine.Submit(PrefillJob{"a", {}, {}, 0, 0, false}, w.Callback()).message(),
              HasSubstr("prompt is empty"));
  EXPECT_THAT(engine.Submit(PrefillJob{"b", {1, 320}, {}, 0, 0, false}, w.Callback()).message(),
              HasSubstr("token id 320"));
  EXPECT_EQ(engine.Submit(PrefillJob{"c", Prompt(200, 1), {}, 0, 0, false}, w.Callback()).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(
      engine
          .Submit(PrefillJob{"d", {1}, SamplingParams{-1.f, 0, 1.f, 0}, 0, 0, false}, w.Callback())
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(w.done.HasBeenNotified());
  EXPECT_EQ(blocks.free_blocks(), blocks.total_blocks());
}

TEST(EnginesTest, PrefillWaitsForCapacityThenTimesOut) {
  auto inst = MakeInstance(int64_t{64} << 10);
  BlockManager blocks(inst->num_blocks());
  PrefillOptions po;
  po.queue_timeout = absl::Milliseconds(150);
  PrefillEngine engine(inst.get(), &blocks, po);
  std::vector<int32_t> taken = *blocks.Allocate(blocks.total_blocks() - 2);
  PrefillWait w;
  ASSERT_TRUE(engine.Submit(PrefillJob{"a", Prompt(40, 2), {}, 0, 0, false}, w.Callback()).ok());
  ASSERT_TRUE(w.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(w.result.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(w.result.status().message(), HasSubstr("queue timeout"));
  // Freed capacity lets the next one through.
  ASSERT_TRUE(blocks.Free(taken).ok());
  PrefillWait w2;
  ASSERT_TRUE(engine.Submit(PrefillJob{"b", Prompt(40, 2), {}, 0, 0, false}, w2.Callback()).ok());
  ASSERT_TRUE(w2.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(w2.result.ok()) << w2.result.status();
  EXPECT_EQ(w2.result->num_tokens, 40);
  ASSERT_TRUE(blocks.Free(w2.result->block_table).ok());
  EXPECT_EQ(blocks.free_blocks(), blocks.total_blocks());
}

TEST(EnginesTest, CancellingAQueuedPrefillFreesNothingAndReportsCancelled) {
  auto inst = MakeInstance(int64_t{64} << 10);
  BlockManager blocks(inst->num_blocks());
  PrefillOptions po;
  po.queue_timeout = absl::Minutes(1);
  PrefillEngine engine(inst.get(), &blocks, po);
  std::vector<int32_t> taken = *blocks.Allocate(blocks.total_blocks());
  PrefillWait w;
  ASSERT_TRUE(engine.Submit(PrefillJob{"x", Prompt(10, 3), {}, 0, 0, false}, w.Callback()).ok());
  EXPECT_TRUE(engine.Cancel("x"));
  ASSERT_TRUE(w.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(w.result.status().code(), absl::StatusCode::kCancelled);
  EXPECT_FALSE(engine.Cancel("x"));
  ASSERT_TRUE(blocks.Free(taken).ok());
  EXPECT_EQ(blocks.free_blocks(), blocks.total_blocks());
}

GenerateResult Generate(CombinedEngine& engine, GenerateRequest req) {
  absl::StatusOr<GenerateResult> r = engine.GenerateBlocking(std::move(req), absl::Seconds(60));
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : GenerateResult{};
}

TEST(EnginesTest, StopTokensAndTokenBudgetEndRequests) {
  auto inst = MakeInstance();
  CombinedEngine engine(inst.get(), PrefillOptions{}, DecodeOptions{});
  GenerateRequest req;
  req.prompt = Prompt(9, 4);
  req.max_new_tokens = 12;
  const GenerateResult full = Generate(engine, req);
  ASSERT_EQ(full.tokens.size(), 12u);
  EXPECT_EQ(full.reason, FinishReason::kLength);
  // Make the 5th generated token a stop token: generation ends before it, and it is not emitted.
  req.stop_ids = {full.tokens[4]};
  const GenerateResult stopped = Generate(engine, req);
  const auto first = std::find(full.tokens.begin(), full.tokens.end(), full.tokens[4]);
  EXPECT_EQ(stopped.tokens, std::vector<int32_t>(full.tokens.begin(), first));
  EXPECT_EQ(stopped.reason, FinishReason::kStop);
  req.stop_ids.clear();
  req.max_new_tokens = 1;
  const GenerateResult one = Generate(engine, req);
  EXPECT_EQ(one.tokens, std::vector<int32_t>{full.tokens[0]});
  EXPECT_EQ(engine.blocks().free_blocks(), engine.blocks().total_blocks());
}

TEST(EnginesTest, RequestsJoiningMidwayDoNotChangeOthersOutput) {
  auto inst = MakeInstance();
  CombinedEngine engine(inst.get(), PrefillOptions{}, DecodeOptions{});
  GenerateRequest a;
  a.id = "a";
  a.prompt = Prompt(13, 5);
  a.max_new_tokens = 40;
  GenerateRequest b;
  b.id = "b";
  b.prompt = Prompt(30, 6);
  b.max_new_tokens = 10;
  const GenerateResult a_alone = Generate(engine, a);
  const GenerateResult b_alone = Generate(engine, b);
  // b joins while a is decoding (after a's 5th token) and leaves before it.
  absl::Notification a_done, b_done;
  absl::StatusOr<GenerateResult> a_res = absl::UnknownError(""), b_res = absl::UnknownError("");
  int a_tokens = 0;
  ASSERT_TRUE(engine
                  .Generate(
                      a,
                      [&](int32_t) {
                        if (++a_tokens == 5) {
                          EXPECT_TRUE(engine
                                          .Generate(
                                              b, [](int32_t) {},
                                              [&](absl::StatusOr<GenerateResult> r) {
                                                b_res = std::move(r);
                                                b_done.Notify();
                                              })
                                          .ok());
                        }
                      },
                      [&](absl::StatusOr<GenerateResult> r) {
                        a_res = std::move(r);
                        a_done.Notify();
                      })
                  .ok());
  ASSERT_TRUE(a_done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  ASSERT_TRUE(b_done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  ASSERT_TRUE(a_res.ok() && b_res.ok());
  EXPECT_EQ(a_res->tokens, a_alone.tokens);
  EXPECT_EQ(b_res->tokens, b_alone.tokens);
  EXPECT_EQ(engine.blocks().free_blocks(), engine.blocks().total_blocks());
}

// Penalties, logit_bias and min_tokens: every generated token is what the sampler picks from the
// logits the engine computed, with the history of prompt + the tokens before it (prefill samples
// the first, decode the rest); batching with another request changes nothing.
// `output_penalty` < 0 favours tokens already generated, so (at a high temperature) the output
// history visibly steers the draws.
SamplingParams PenalisedSampling(float temperature, float output_penalty) {
  SamplingParams s;
  s.temperature = temperature;
  s.seed = 77;
  s.repetition_penalty = 1.4f;
  s.presence_penalty = output_penalty;
  s.frequency_penalty = output_penalty;
  s.logit_bias = {{7, 3.f}, {11, -2.f}};
  s.min_tokens = 4;
  s.min_tokens_stop_ids = {7};
  return s;
}

TEST(EnginesTest, PenalisedSamplingSeesThePromptAndOutputAndIgnoresBatching) {
  auto inst = MakeInstance();
  CombinedEngine engine(inst.get(), PrefillOptions{}, DecodeOptions{});
  GenerateRequest a;
  a.id = "a";
  a.prompt = Prompt(11, 8);
  a.max_new_tokens = 24;
  a.sampling = PenalisedSampling(0.9f, 1.5f);
  a.return_logits = true;
  const GenerateResult alone = Generate(engine, a);
  ASSERT_EQ(alone.tokens.size(), 24u);
  ASSERT_EQ(alone.logits.size(), 24u);
  std::vector<int32_t> context = a.prompt;
  for (size_t i = 0; i < alone.tokens.size(); ++i) {
    const TokenHistory history(context, static_cast<int64_t>(i));
    EXPECT_EQ(alone.tokens[i], SampleToken(alone.logits[i], a.sampling, i, &history)) << i;
    context.push_back(alone.tokens[i]);
  }
  // Without the penalties the same seed gives another sequence (they did something).
  GenerateRequest plain = a;
  plain.sampling = SamplingParams{};
  plain.sampling.temperature = 0.9f;
  plain.sampling.seed = 77;
  EXPECT_NE(Generate(engine, plain).tokens, alone.tokens);

  // Batched with another penalised request that joins midway.
  GenerateRequest b = a;
  b.id = "b";
  b.prompt = Prompt(20, 9);
  b.sampling.seed = 78;
  absl::Notification a_done, b_done;
  absl::StatusOr<GenerateResult> a_res = absl::UnknownError(""), b_res = absl::UnknownError("");
  int a_tokens = 0;
  ASSERT_TRUE(engine
                  .Generate(
                      a,
                      [&](int32_t) {
                        if (++a_tokens != 3) return;
                        EXPECT_TRUE(engine
                                        .Generate(
                                            b, [](int32_t) {},
                                            [&](absl::StatusOr<GenerateResult> r) {
                                              b_res = std::move(r);
                                              b_done.Notify();
                                            })
                                        .ok());
                      },
                      [&](absl::StatusOr<GenerateResult> r) {
                        a_res = std::move(r);
                        a_done.Notify();
                      })
                  .ok());
  ASSERT_TRUE(a_done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  ASSERT_TRUE(b_done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  ASSERT_TRUE(a_res.ok() && b_res.ok());
  EXPECT_EQ(a_res->tokens, alone.tokens);
  EXPECT_EQ(engine.blocks().free_blocks(), engine.blocks().total_blocks());
}

// A resume after k streamed tokens (router/request_state.h): prefill prompt + g[0..k-1) with
// sample_step k-1, decode from first_token g[k-1] with next_step k and that context. The
// penalties count g[0..k-1) as output, so the continuation is the uninterrupted run's.
TEST(EnginesTest, PenalisedSamplingContinuesExactlyAfterAResume) {
  auto inst = MakeInstance();
  GenerateRequest full_req;
  full_req.prompt = Prompt(9, 10);
  full_req.max_new_tokens = 16;
  full_req.sampling = PenalisedSampling(3.f, -2.f);
  std::vector<int32_t> g;
  {
    CombinedEngine engine(inst.get(), PrefillOptions{}, DecodeOptions{});
    g = Generate(engine, full_req).tokens;
  }
  ASSERT_EQ(g.size(), 16u);
  BlockManager blocks(inst->num_blocks());
  PrefillEngine prefill(inst.get(), &blocks, PrefillOptions{});
  DecodeEngine decode(inst.get(), &blocks, DecodeOptions{});
  const int k = 6;
  PrefillJob pr;
  pr.id = "resume";
  pr.prompt = full_req.prompt;
  pr.prompt.insert(pr.prompt.end(), g.begin(), g.begin() + (k - 1));
  pr.sampling = full_req.sampling;
  pr.sample_step = k - 1;
  pr.reserve_tokens = full_req.max_new_tokens - (k - 1);
  PrefillWait wait;
  ASSERT_TRUE(prefill.Submit(pr, wait.Callback()).ok());
  ASSERT_TRUE(wait.done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  ASSERT_TRUE(wait.result.ok()) << wait.result.status();
  DecodeJob dr;
  dr.id = "resume";
  dr.prompt_len = wait.result->num_tokens;
  dr.first_token = g[k - 1];
  dr.block_table = wait.result->block_table;
  dr.sampling = full_req.sampling;
  dr.max_new_tokens = full_req.max_new_tokens - (k - 1);
  dr.next_step = k;
  dr.context = pr.prompt;
  std::vector<int32_t> rest;
  absl::Notification done;
  DecodeCallbacks cb;
  cb.on_token = [&](int32_t t) { rest.push_back(t); };
  cb.on_done = [&](absl::Status, FinishReason, int32_t) { done.Notify(); };
  // The context must cover the KV's positions.
  DecodeJob short_context = dr;
  short_context.context.pop_back();
  EXPECT_THAT(decode.Add(short_context, DecodeCallbacks{}).message(),
              HasSubstr("penalties need the context"));
  ASSERT_TRUE(decode.Add(dr, cb).ok());
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  EXPECT_EQ(rest, std::vector<int32_t>(g.begin() + k, g.end()));
  EXPECT_EQ(blocks.free_blocks(), blocks.total_blocks());
}

TEST(EnginesTest, CancellingADecodingRequestFreesItsBlocks) {
  auto inst = MakeInstance();
  CombinedEngine engine(inst.get(), PrefillOptions{}, DecodeOptions{});
  GenerateRequest req;
  req.id = "long";
  req.prompt = Prompt(20, 7);
  req.max_new_tokens = 200;
  absl::Notification done;
  absl::StatusOr<GenerateResult> res = absl::UnknownError("");
  int n = 0;
  ASSERT_TRUE(engine
                  .Generate(
                      req,
                      [&](int32_t) {
                        if (++n == 3) engine.Cancel("long");
                      },
                      [&](absl::StatusOr<GenerateResult> r) {
                        res = std::move(r);
                        done.Notify();
                      })
                  .ok());
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  EXPECT_EQ(res.status().code(), absl::StatusCode::kCancelled);
  EXPECT_LT(n, 200);
  EXPECT_EQ(engine.blocks().free_blocks(), engine.blocks().total_blocks());
}

}  // namespace
}  // namespace tandem
