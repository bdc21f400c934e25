#include "router/request_state.h"

#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

using testing::ElementsAre;
using testing::ElementsAreArray;

const std::vector<int32_t> kPrompt = {5, 6, 7};
constexpr int32_t kStop = 2;

RequestState NewState(int32_t max_tokens, int max_attempts = 3) {
  return RequestState(kPrompt, max_tokens, {kStop}, max_attempts);
}

TEST(RequestStateTest, HappyPathPrefillThenDecode) {
  RequestState s = NewState(4);
  ASSERT_EQ(s.phase(), RequestPhase::kPrefill);
  const PrefillPlan p = s.NextPrefill();
  EXPECT_THAT(p.prompt_ids, ElementsAreArray(kPrompt));
  EXPECT_EQ(p.sample_step, 0u);
  EXPECT_EQ(p.max_new_tokens, 4);
  EXPECT_FALSE(p.resume);

  EXPECT_EQ(s.OnPrefillOk(10), 10);
  EXPECT_TRUE(s.kv_to_release());
  ASSERT_EQ(s.phase(), RequestPhase::kDecode);
  const DecodePlan d = s.NextDecode();
  EXPECT_EQ(d.first_token, 10);
  EXPECT_EQ(d.max_new_tokens, 4);
  EXPECT_EQ(d.next_step, 1u);

  EXPECT_EQ(s.OnDecodeToken(11), 1);
  EXPECT_FALSE(s.kv_to_release());  // the decode node has the KV now
  EXPECT_EQ(s.OnDecodeToken(12), 2);
  EXPECT_EQ(s.OnDecodeToken(13), 3);
  s.OnDecodeFinished(FinishReason::kLength);
  ASSERT_EQ(s.phase(), RequestPhase::kDone);
  EXPECT_EQ(s.finish_reason(), FinishReason::kLength);
  EXPECT_THAT(s.streamed(), ElementsAre(10, 11, 12, 13));
  EXPECT_EQ(s.retries(), 0);
}

TEST(RequestStateTest, PrefillRetryBeforeFirstTokenRepeatsTheSameCall) {
  RequestState s = NewState(4);
  s.OnPrefillFailed(absl::UnavailableError("connection refused"));
  ASSERT_EQ(s.phase(), RequestPhase::kPrefill);
  EXPECT_EQ(s.retries(), 1);
  s.OnPrefillFailed(absl::DeadlineExceededError("slow"));
  ASSERT_EQ(s.phase(), RequestPhase::kPrefill);
  EXPECT_EQ(s.retries(), 2);
  const PrefillPlan p = s.NextPrefill();
  EXPECT_THAT(p.prompt_ids, ElementsAreArray(kPrompt));
  EXPECT_EQ(p.sample_step, 0u);
  EXPECT_EQ(p.max_new_tokens, 4);
  EXPECT_FALSE(p.resume);
  EXPECT_EQ(s.OnPrefillOk(10), 10);
  EXPECT_EQ(s.phase(), RequestPhase::kDecode);
}

TEST(RequestStateTest, AttemptsAreBounded) {
  RequestState s = NewState(4, /*max_attempts=*/3);
  s.OnPrefillFailed(absl::UnavailableError("a"));
  s.OnPrefillFailed(absl::UnavailableError("b"));
  s.OnPrefillFailed(absl::AbortedError("node shutting down"));
  ASSERT_EQ(s.phase(), RequestPhase::kFailed);
  EXPECT_EQ(s.error().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(s.error().message(), "node shutting down (gave up after 3 failed attempts)");
  EXPECT_EQ(s.retries(), 3);
}

TEST(RequestStateTest, OneAttemptMeansNoRetry) {
  RequestState s = NewState(4, /*max_attempts=*/1);
  s.OnPrefillFailed(absl::UnavailableError("down"));
  ASSERT_EQ(s.phase(), RequestPhase::kFailed);
  EXPECT_EQ(s.error().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.error().message(), "down (gave up after 1 failed attempts)");
}

TEST(RequestStateTest, NonRetryablePrefillErrorsReachTheClientUnchanged) {
  for (const absl::Status& error :
       {absl::InvalidArgumentError("bad ids"), absl::ResourceExhaustedError("no KV blocks"),
        absl::FailedPreconditionError("incompatible layout"), absl::InternalError("bug"),
        absl::CancelledError("cancelled")}) {
    RequestState s = NewState(4);
    s.OnPrefillFailed(error);
    ASSERT_EQ(s.phase(), RequestPhase::kFailed) << error;
    EXPECT_EQ(s.error(), error);
    EXPECT_EQ(s.retries(), 0);
  }
}

TEST(RequestStateTest, MidStreamResumePrefillsPromptPlusStreamedButLast) {
  RequestState s = NewState(6);
  ASSERT_EQ(s.OnPrefillOk(10), 10);
  ASSERT_EQ(s.OnDecodeToken(11), 1);
  ASSERT_EQ(s.OnDecodeToken(12), 2);
  s.OnDecodeFailed(absl::UnavailableError("decode node died"));
  ASSERT_EQ(s.phase(), RequestPhase::kPrefill);
  EXPECT_EQ(s.retries(), 1);
  EXPECT_FALSE(s.kv_to_release());  // the dead decode node had taken the KV

  // k = 3 streamed: prefill prompt + g[0..2), sample_step 2, budget 6 - 2 = 4.
  const PrefillPlan p = s.NextPrefill();
  EXPECT_THAT(p.prompt_ids, ElementsAre(5, 6, 7, 10, 11));
  EXPECT_EQ(p.sample_step, 2u);
  EXPECT_EQ(p.max_new_tokens, 4);
  EXPECT_TRUE(p.resume);

  EXPECT_EQ(s.OnPrefillOk(99), std::nullopt);  // resampled g[2] is ignored
  ASSERT_EQ(s.phase(), RequestPhase::kDecode);
  EXPECT_TRUE(s.kv_to_release());
  const DecodePlan d = s.NextDecode();
  EXPECT_EQ(d.first_token, 12);
  EXPECT_EQ(d.max_new_tokens, 4);
  EXPECT_EQ(d.next_step, 3u);

  EXPECT_EQ(s.OnDecodeToken(13), 3);
  EXPECT_EQ(s.OnDecodeToken(14), 4);
  EXPECT_EQ(s.OnDecodeToken(15), 5);
  s.OnDecodeFinished(FinishReason::kLength);
  ASSERT_EQ(s.phase(), RequestPhase::kDone);
  EXPECT_THAT(s.streamed(), ElementsAre(10, 11, 12, 13, 14, 15));
  EXPECT_EQ(s.retries(), 1);
}

TEST(RequestStateTest, DecodeFailureBeforeAnyEventKeepsTheKvToRelease) {
  RequestState s = NewState(5);
  ASSERT_EQ(s.OnPrefillOk(10), 10);
  s.OnDecodeFailed(absl::UnavailableError("connection refused"));
  ASSERT_EQ(s.phase(), RequestPhase::kPrefill);
  EXPECT_TRUE(s.kv_to_release());
  s.OnKvReleased();
  const PrefillPlan p = s.NextPrefill();
  EXPECT_THAT(p.prompt_ids, ElementsAreArray(kPrompt));  // k = 1: nothing appended
  EXPECT_EQ(p.sample_step, 0u);
  EXPECT_EQ(p.max_new_tokens, 5);
  EXPECT_TRUE(p.resume);
  EXPECT_EQ(s.OnPrefillOk(77), std::nullopt);
  const DecodePlan d = s.NextDecode();
  EXPECT_EQ(d.first_token, 10);
  EXPECT_EQ(d.max_new_tokens, 5);
  EXPECT_EQ(d.next_step, 1u);
}

TEST(RequestStateTest, RetryableAndFatalDecodeErrors) {
  for (const absl::StatusCode code :
       {absl::StatusCode::kUnavailable, absl::StatusCode::kAborted, absl::StatusCode::kInternal,
        absl::StatusCode::kUnknown, absl::StatusCode::kDeadlineExceeded}) {
    RequestState s = NewState(4);
    s.OnPrefillOk(10);
    s.OnDecodeFailed(absl::Status(code, "x"));
    EXPECT_EQ(s.phase(), RequestPhase::kPrefill) << code;
  }
  for (const absl::StatusCode code :
       {absl::StatusCode::kInvalidArgument, absl::StatusCode::kResourceExhausted,
        absl::StatusCode::kFailedPrecondition, absl::StatusCode::kCancelled,
        absl::StatusCode::kNotFound}) {
    RequestState s = NewState(4);
    s.OnPrefillOk(10);
    s.OnDecodeToken(11);
    const absl::Status error(code, "fatal");
    s.OnDecodeFailed(error);
    ASSERT_EQ(s.phase(), RequestPhase::kFailed) << code;
    EXPECT_EQ(s.error(), error);
  }
}

TEST(RequestStateTest, StopTokenFromPrefillEndsWithoutStreamingIt) {
  RequestState s = NewState(8);
  EXPECT_EQ(s.OnPrefillOk(kStop), std::nullopt);
  ASSERT_EQ(s.phase(), RequestPhase::kDone);
  EXPECT_EQ(s.finish_reason(), FinishReason::kStop);
  EXPECT_TRUE(s.streamed().empty());
  EXPECT_TRUE(s.kv_to_release());  // no decode node will take it
}

TEST(RequestStateTest, IgnoreEosStreamsStopIds) {
  RequestState s(kPrompt, 3, /*stop_ids=*/{}, 3);
  EXPECT_EQ(s.OnPrefillOk(kStop), kStop);
  EXPECT_EQ(s.phase(), RequestPhase::kDecode);
}

TEST(RequestStateTest, SingleTokenBudgetNeedsNoDecode) {
  RequestState s = NewState(1);
  EXPECT_EQ(s.OnPrefillOk(10), 10);
  ASSERT_EQ(s.phase(), RequestPhase::kDone);
  EXPECT_EQ(s.finish_reason(), FinishReason::kLength);
  EXPECT_TRUE(s.kv_to_release());
}

TEST(RequestStateTest, TokensBeyondTheBudgetAreDropped) {
  RequestState s = NewState(2);
  s.OnPrefillOk(10);
  EXPECT_EQ(s.OnDecodeToken(11), 1);
  EXPECT_EQ(s.OnDecodeToken(12), std::nullopt);
  ASSERT_EQ(s.phase(), RequestPhase::kDone);
  EXPECT_EQ(s.finish_reason(), FinishReason::kLength);
  EXPECT_THAT(s.streamed(), ElementsAre(10, 11));
}

TEST(RequestStateTest, LostFinishAfterTheLastTokenIsNotResumed) {
  RequestState s = NewState(3);
  s.OnPrefillOk(10);
  s.OnDecodeToken(11);
  s.OnDecodeToken(12);
  s.OnDecodeFailed(absl::UnavailableError("died before the finish event"));
  ASSERT_EQ(s.phase(), RequestPhase::kDone);
  EXPECT_EQ(s.finish_reason(), FinishReason::kLength);
  EXPECT_EQ(s.retries(), 0);
}

TEST(RequestStateTest, AttemptsAreSharedByPrefillAndDecodeFailures) {
  RequestState s = NewState(6, /*max_attempts=*/2);
  s.OnPrefillOk(10);
  s.OnDecodeToken(11);
  s.OnDecodeFailed(absl::InternalError("stream broke"));
  ASSERT_EQ(s.phase(), RequestPhase::kPrefill);
  s.OnPrefillFailed(absl::UnavailableError("prefill down"));
  ASSERT_EQ(s.phase(), RequestPhase::kFailed);
  EXPECT_EQ(s.error().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.error().message(), "prefill down (gave up after 2 failed attempts)");
  EXPECT_THAT(s.streamed(), ElementsAre(10, 11));
}

TEST(RequestStateTest, FailKeepsAnUntakenKvToRelease) {
  RequestState s = NewState(6);
  s.OnPrefillOk(10);
  s.Fail(absl::CancelledError("request cancelled by the client"));
  ASSERT_EQ(s.phase(), RequestPhase::kFailed);
  EXPECT_EQ(s.error().code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(s.kv_to_release());
  s.OnDecodeFinished(FinishReason::kStop);  // late events change nothing
  EXPECT_EQ(s.phase(), RequestPhase::kFailed);
}

// Drives the state machine against simulated nodes that obey the protocol exactly (prefill
// samples draw sample_step; decode emits draws next_step.. until max_new_tokens tokens counting
// first_token) and fail at random points. Whatever the failures, a finished request streams
// g(0..max_tokens) once each, in order.
TEST(RequestStateTest, RandomFailuresNeverDuplicateOrDropTokens) {
  const auto g = [](uint64_t step) { return static_cast<int32_t>(100 + step); };
  std::mt19937 rng(12345);
  int finished = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    const int32_t max_tokens = 1 + static_cast<int32_t>(rng() % 12);
    RequestState s(kPrompt, max_tokens, {kStop}, /*max_attempts=*/6);
    std::vector<int32_t> client;
    while (s.phase() == RequestPhase::kPrefill || s.phase() == RequestPhase::kDecode) {
      if (s.phase() == RequestPhase::kPrefill) {
        if (rng() % 4 == 0) {
          s.OnPrefillFailed(absl::UnavailableError("x"));
          continue;
        }
        const PrefillPlan p = s.NextPrefill();
        // The prompt holds exactly the tokens before draw sample_step.
        ASSERT_EQ(p.prompt_ids.size(), kPrompt.size() + p.sample_step);
        for (uint64_t i = 0; i < p.sample_step; ++i) {
          ASSERT_EQ(p.prompt_ids[kPrompt.size() + i], g(i));
        }
        ASSERT_EQ(p.prompt_ids.size() + p.max_new_tokens, kPrompt.size() + max_tokens);
        if (s.kv_to_release()) s.OnKvReleased();
        if (const auto t = s.OnPrefillOk(g(p.sample_step))) client.push_back(*t);
        continue;
      }
      const DecodePlan d = s.NextDecode();
      ASSERT_EQ(d.first_token, g(d.next_step - 1));
      const int32_t to_emit = d.max_new_tokens - 1;
      const int32_t die_after = rng() % 3 == 0 ? static_cast<int32_t>(rng() % (to_emit + 1)) : -1;
      bool failed = false;
      for (int32_t i = 0; i < to_emit; ++i) {
        if (i == die_after) {
          s.OnDecodeFailed(absl::AbortedError("died"));
          failed = true;
          break;
        }
        if (const auto index = s.OnDecodeToken(g(d.next_step + i))) {
          ASSERT_EQ(*index, static_cast<int32_t>(client.size()));
          client.push_back(g(d.next_step + i));
        }
      }
      if (!failed && die_after == to_emit) {
        s.OnDecodeFailed(absl::UnavailableError("died before the finish event"));
      } else if (!failed) {
        s.OnDecodeFinished(FinishReason::kLength);
      }
    }
    if (s.phase() == RequestPhase::kDone) {
      ++finished;
      std::vector<int32_t> want;
      for (int32_t i = 0; i < max_tokens; ++i) want.push_back(g(i));
      ASSERT_EQ(client, want) << "trial " << trial;
      ASSERT_EQ(s.streamed(), want);
    } else {
      ASSERT_EQ(s.retries(), 6);
    }
  }
  EXPECT_GT(finished, 1500);
}

TEST(RequestStateCalls, NextCallFollowsTheModeAndThePhase) {
  RequestState s({1, 2, 3}, 4, {}, 3);
  EXPECT_EQ(s.NextCall(false, false), NodeCall::kPrefill);
  EXPECT_EQ(s.NextCall(false, true), NodeCall::kPipelined);
  EXPECT_EQ(s.NextCall(true, false), NodeCall::kColocated);
  ASSERT_TRUE(s.OnPrefillOk(7).has_value());
  EXPECT_EQ(s.NextCall(false, true), NodeCall::kDecode);
  EXPECT_EQ(s.NextCall(true, false), NodeCall::kColocated);
  // A resume (tokens streamed) is never pipelined.
  s.OnKvReleased();
  s.OnDecodeFailed(absl::UnavailableError("gone"));
  ASSERT_EQ(s.phase(), RequestPhase::kPrefill);
  EXPECT_EQ(s.NextCall(false, true), NodeCall::kPrefill);
}

TEST(RequestStateCalls, DecodeCallFailureBeforeTheFirstTokenIsAPrefillFailure) {
  const RequestState s({1, 2, 3}, 4, {}, 3);
  const DecodeCallVerdict colocated =
      s.JudgeDecodeCallFailure(NodeCall::kColocated, absl::StatusCode::kUnavailable);
  EXPECT_TRUE(colocated.retryable);
  EXPECT_TRUE(colocated.as_prefill_failure);
  EXPECT_EQ(colocated.recovery, Recovery::kPrefillRetry);
  EXPECT_FALSE(colocated.release_kv_first);
  // INTERNAL is no prefill retry: a colocated call fails with it.
  EXPECT_FALSE(
      s.JudgeDecodeCallFailure(NodeCall::kColocated, absl::StatusCode::kInternal).retryable);

  // Pipelined: whatever broke is retried as the prefill, the KV released first; a decode-side
  // code the prefill rule would not retry goes on as UNAVAILABLE.
  const DecodeCallVerdict pipelined =
      s.JudgeDecodeCallFailure(NodeCall::kPipelined, absl::StatusCode::kInternal);
  EXPECT_TRUE(pipelined.retryable);
  EXPECT_TRUE(pipelined.as_prefill_failure);
  EXPECT_EQ(pipelined.recovery, Recovery::kReprefill);
  EXPECT_TRUE(pipelined.release_kv_first);
  EXPECT_TRUE(pipelined.as_unavailable);
  EXPECT_FALSE(s.JudgeDecodeCallFailure(NodeCall::kPipelined, absl::StatusCode::kUnavailable)
                   .as_unavailable);
  EXPECT_FALSE(
      s.JudgeDecodeCallFailure(NodeCall::kPipelined, absl::StatusCode::kInvalidArgument).retryable);
}

TEST(RequestStateCalls, DecodeCallFailureAfterTheFirstTokenResumesOrReprefills) {
  RequestState s({1, 2, 3}, 4, {}, 3);
  ASSERT_TRUE(s.OnPrefillOk(7).has_value());
  // The decode node never took the KV: prefill again.
  DecodeCallVerdict v = s.JudgeDecodeCallFailure(NodeCall::kDecode, absl::StatusCode::kAborted);
  EXPECT_TRUE(v.retryable);
  EXPECT_FALSE(v.as_prefill_failure);
  EXPECT_EQ(v.recovery, Recovery::kReprefill);
  s.OnKvReleased();  // its first event came
  v = s.JudgeDecodeCallFailure(NodeCall::kPipelined, absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(v.retryable);
  EXPECT_EQ(v.recovery, Recovery::kResume);
  EXPECT_FALSE(v.release_kv_first);
  EXPECT_FALSE(
      s.JudgeDecodeCallFailure(NodeCall::kDecode, absl::StatusCode::kResourceExhausted).retryable);
}

}  // namespace
}  // namespace tandem
