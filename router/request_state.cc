#include "router/request_state.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace tandem {

bool IsRetryablePrefillError(absl::StatusCode code) {
  return code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kDeadlineExceeded ||
         code == absl::StatusCode::kAborted;
}

bool IsRetryableDecodeError(absl::StatusCode code) {
  return code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kAborted ||
         code == absl::StatusCode::kInternal || code == absl::StatusCode::kUnknown ||
         code == absl::StatusCode::kDeadlineExceeded;
}

RequestState::RequestState(std::vector<int32_t> prompt, int32_t max_tokens,
                           std::vector<int32_t> stop_ids, int max_attempts)
    : prompt_(std::move(prompt)),
      max_tokens_(max_tokens),
      stop_ids_(stop_ids.begin(), stop_ids.end()),
      max_attempts_(max_attempts) {
  streamed_.reserve(static_cast<size_t>(max_tokens_));
}

PrefillPlan RequestState::NextPrefill() const {
  PrefillPlan plan;
  const int64_t k = static_cast<int64_t>(streamed_.size());
  plan.prompt_ids = prompt_;
  if (k == 0) {
    plan.sample_step = 0;
    plan.max_new_tokens = max_tokens_;
    return plan;
  }
  plan.resume = true;
  plan.prompt_ids.insert(plan.prompt_ids.end(), streamed_.begin(), streamed_.end() - 1);
  plan.sample_step = static_cast<uint64_t>(k - 1);
  plan.max_new_tokens = static_cast<int32_t>(max_tokens_ - (k - 1));
  return plan;
}

NodeCall RequestState::NextCall(bool colocated, bool pipelined) const {
  if (colocated) return NodeCall::kColocated;
  if (phase_ == RequestPhase::kDecode) return NodeCall::kDecode;
  return pipelined && streamed_.empty() ? NodeCall::kPipelined : NodeCall::kPrefill;
}

DecodeCallVerdict RequestState::JudgeDecodeCallFailure(NodeCall call, absl::StatusCode code) const {
  DecodeCallVerdict verdict;
  if (phase_ == RequestPhase::kPrefill) {
    verdict.as_prefill_failure = true;
    if (call == NodeCall::kColocated) {
      verdict.retryable = IsRetryablePrefillError(code);
      verdict.recovery = Recovery::kPrefillRetry;
      return verdict;
    }
    verdict.retryable = IsRetryableDecodeError(code);
    verdict.recovery = Recovery::kReprefill;
    verdict.release_kv_first = true;
    verdict.as_unavailable = verdict.retryable && !IsRetryablePrefillError(code);
    return verdict;
  }
  verdict.retryable = IsRetryableDecodeError(code);
  // The decode node never took the KV (no event yet): the transfer failed, and recovering means
  // prefilling again; after its tokens, resuming elsewhere.
  verdict.recovery = kv_owned_ ? Recovery::kReprefill : Recovery::kResume;
  return verdict;
}

DecodePlan RequestState::NextDecode() const {
  const int64_t k = static_cast<int64_t>(streamed_.size());
  DecodePlan plan;
  plan.first_token = streamed_.back();
  plan.max_new_tokens = static_cast<int32_t>(max_tokens_ - (k - 1));
  plan.next_step = static_cast<uint64_t>(k);
  return plan;
}

std::optional<int32_t> RequestState::OnPrefillOk(int32_t sampled) {
  if (phase_ != RequestPhase::kPrefill) return std::nullopt;
  kv_owned_ = true;
  if (!streamed_.empty()) {  // resume: g[k-1] is already known
    phase_ = RequestPhase::kDecode;
    return std::nullopt;
  }
  if (stop_ids_.contains(sampled)) {
    Finish(FinishReason::kStop);
    return std::nullopt;
  }
  streamed_.push_back(sampled);
  if (static_cast<int32_t>(streamed_.size()) >= max_tokens_) {
    Finish(FinishReason::kLength);
  } else {
    phase_ = RequestPhase::kDecode;
  }
  return sampled;
}

void RequestState::OnPrefillFailed(const absl::Status& error) {
  if (phase_ != RequestPhase::kPrefill) return;
  if (!IsRetryablePrefillError(error.code())) {
    Fail(error);
    return;
  }
  Retry(error, RequestPhase::kPrefill);
}

std::optional<int32_t> RequestState::OnDecodeToken(int32_t token) {
  if (phase_ != RequestPhase::kDecode) return std::nullopt;
  kv_owned_ = false;
  if (static_cast<int32_t>(streamed_.size()) >= max_tokens_) {
    Finish(FinishReason::kLength);
    return std::nullopt;
  }
  streamed_.push_back(token);
  return static_cast<int32_t>(streamed_.size() - 1);
}

void RequestState::OnDecodeFinished(FinishReason reason) {
  if (phase_ != RequestPhase::kDecode) return;
  kv_owned_ = false;
  Finish(reason);
}

void RequestState::OnDecodeFailed(const absl::Status& error) {
  if (phase_ != RequestPhase::kDecode) return;
  if (!IsRetryableDecodeError(error.code())) {
    Fail(error);
    return;
  }
  if (static_cast<int32_t>(streamed_.size()) >= max_tokens_) {
    // Everything was streamed; only the finish event was lost.
    Finish(FinishReason::kLength);
    return;
  }
  Retry(error, RequestPhase::kPrefill);
}

void RequestState::Fail(absl::Status error) {
  if (phase_ == RequestPhase::kDone || phase_ == RequestPhase::kFailed) return;
  phase_ = RequestPhase::kFailed;
  error_ = std::move(error);
}

void RequestState::Finish(FinishReason reason) {
  phase_ = RequestPhase::kDone;
  reason_ = reason;
}

void RequestState::Retry(const absl::Status& error, RequestPhase next) {
  ++failures_;
  if (failures_ >= max_attempts_) {
    Fail(absl::Status(error.code(), absl::StrCat(error.message(), " (gave up after ", failures_,
                                                 " failed attempts)")));
    return;
  }
  phase_ = next;
}

}  // namespace tandem
