// The life of one Generate request across prefill and decode nodes, including retries and
// mid-stream resume (docs/design.md#retry-and-resume). Pure: the driver performs the calls and
// reports their outcomes; this class decides what to call next and which tokens reach the client.
//
// Generated tokens g[0], g[1], ... use sampling draws 0, 1, ...: prefill samples g[0] with
// PrefillRequest.sample_step = 0; decode gets first_token = g[0] (already streamed) and samples
// g[1] with DecodeRequest.next_step = 1.
//
// With k >= 1 tokens streamed, one formula gives both the first decode call (k = 1) and a resume
// after a decode failure (k >= 1): prefill prompt + g[0..k-1) with sample_step = k-1 and
// max_new_tokens = max_tokens - (k-1) -- the prefill's sampled token is ignored, since g[k-1] is
// already known -- then decode with first_token = g[k-1], max_new_tokens = max_tokens - (k-1),
// next_step = k. The KV then covers exactly the positions before g[k-1], and the client sees
// every token once.
//
// Failures:
//   prefill: UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED (node gone, slow, or shutting down) are
//            retried on another node;
//   decode:  UNAVAILABLE, ABORTED, INTERNAL, UNKNOWN, DEADLINE_EXCEEDED (node died, stream broke,
//            idle timeout, lease lost) resume the request as above;
//   anything else (INVALID_ARGUMENT, RESOURCE_EXHAUSTED, FAILED_PRECONDITION, ...) is returned
//   to the client unchanged. Each retryable failure costs one attempt; the failure that reaches
//   `max_attempts` is returned (its code kept, the message saying so).
//
// KV ownership: after a successful prefill the router owns the prefill node's KV lease until a
// decode node takes it, which the router learns from the decode call's first event (token or
// finish). kv_to_release() says the driver must call ReleaseKv before moving on.
//
// Not thread-safe: one driver thread owns a RequestState.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/finish_reason.h"
#include "router/provenance.h"

namespace tandem {

enum class RequestPhase {
  kPrefill,  // call Prefill with NextPrefill()
  kDecode,   // call Decode with NextDecode()
  kDone,     // finished normally: finish_reason()
  kFailed,   // finished with error()
};

struct PrefillPlan {
  std::vector<int32_t> prompt_ids;
  uint64_t sample_step = 0;
  int32_t max_new_tokens = 0;
  bool resume = false;  // the sampled token will be ignored
};

struct DecodePlan {
  int32_t first_token = 0;
  int32_t max_new_tokens = 0;  // first_token included
  uint64_t next_step = 0;
};

bool IsRetryablePrefillError(absl::StatusCode code);
bool IsRetryableDecodeError(absl::StatusCode code);

// The node call that serves the request's next step.
enum class NodeCall {
  kPrefill,    // Prefill, then (phase kDecode) a Decode call with the KV handle
  kPipelined,  // Prefill with an early handle, its Decode call sent while the prefill runs
  kDecode,     // Decode with NextDecode()
  kColocated,  // one Decode call with the prompt: prefill and decode on one node
};

// What a failed Decode-family call (any NodeCall but kPrefill) means for the request, decided
// from the phase it failed in (RequestState::JudgeDecodeCallFailure).
struct DecodeCallVerdict {
  bool retryable = false;
  Recovery recovery = Recovery::kResume;
  // Before the first token (phase kPrefill): handed to OnPrefillFailed, else OnDecodeFailed.
  bool as_prefill_failure = false;
  // A pipelined call before its first token: the prefill's KV is released first (which cancels
  // the prefill if it still runs), and a retryable decode-side code that the prefill retry rule
  // would not retry is handed on as UNAVAILABLE.
  bool release_kv_first = false;
  bool as_unavailable = false;
};
class RequestState {
 public:
  // REQUIRES: prompt non-empty, max_tokens >= 1, max_attempts >= 1 (validated by the caller).
  // `stop_ids` end generation when prefill samples one (decode nodes apply them themselves);
  // empty with ignore_eos.
  RequestState(std::vector<int32_t> prompt, int32_t max_tokens, std::vector<int32_t> stop_ids,
               int max_attempts);

  RequestPhase phase() const { return phase_; }

  // REQUIRES: phase() is kPrefill or kDecode. `colocated`, `pipelined`: the router's modes
  // (RouterOptions). A colocated router serves every step with one colocated call; a pipelined
  // one pipelines a request's first prefill only (a resume's sampled token is ignored).
  NodeCall NextCall(bool colocated, bool pipelined) const;
  // REQUIRES: `call` is not kPrefill; phase() is still the one the call failed in.
  // Before the first token (kPrefill) a colocated call failed like a prefill (retried when
  // IsRetryablePrefillError: kPrefillRetry), a pipelined one like its prefill whatever broke
  // (retried when IsRetryableDecodeError: kReprefill); after it, a decode failure (retried when
  // IsRetryableDecodeError: kReprefill while the router still owns the KV, else kResume).
  DecodeCallVerdict JudgeDecodeCallFailure(NodeCall call, absl::StatusCode code) const;

  // REQUIRES: phase() == kPrefill.
  PrefillPlan NextPrefill() const;
  // REQUIRES: phase() == kDecode.
  DecodePlan NextDecode() const;

  // Prefill returned `sampled` and a KV handle. Returns the token to stream to the client with
  // its index (none on a resume, or when it is a stop id).
  std::optional<int32_t> OnPrefillOk(int32_t sampled);
  void OnPrefillFailed(const absl::Status& error);

  // A token from the decode stream. Returns its index in the generated sequence, to stream;
  // none when the budget is already spent (the extra token is dropped and the request ends
  // with "length", so the client never gets more than max_tokens).
  std::optional<int32_t> OnDecodeToken(int32_t token);
  // reason: what the decode node reported.
  void OnDecodeFinished(FinishReason reason);
  void OnDecodeFailed(const absl::Status& error);

  // Ends the request with `error` (no healthy node, client cancellation, ...), whatever phase.
  void Fail(absl::Status error);

  bool kv_to_release() const { return kv_owned_; }
  void OnKvReleased() { kv_owned_ = false; }

  const std::vector<int32_t>& prompt() const { return prompt_; }
  const std::vector<int32_t>& streamed() const { return streamed_; }
  int32_t max_tokens() const { return max_tokens_; }
  // Failures recovered from (or, once failed, retryable failures seen).
  int retries() const { return failures_; }
  // REQUIRES: phase() == kDone.
  FinishReason finish_reason() const { return reason_; }
  // REQUIRES: phase() == kFailed.
  const absl::Status& error() const { return error_; }

 private:
  void Finish(FinishReason reason);
  // Counts a retryable failure and moves to `next`, or fails when attempts are spent.
  void Retry(const absl::Status& error, RequestPhase next);

  const std::vector<int32_t> prompt_;
  const int32_t max_tokens_;
  const absl::flat_hash_set<int32_t> stop_ids_;
  const int max_attempts_;

  RequestPhase phase_ = RequestPhase::kPrefill;
  std::vector<int32_t> streamed_;
  int failures_ = 0;
  bool kv_owned_ = false;
  FinishReason reason_ = FinishReason::kLength;
  absl::Status error_;
};

}  // namespace tandem
