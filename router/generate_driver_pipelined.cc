// Pipelined transfer (RouterOptions::pipelined_transfer): Driver::PipelinedDecode, the Decode
// call sent while the prefill still runs, with the router's own watch of the prefill's progress
// (generate_driver_internal.h).
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/convert/finish_reason_proto.h"
#include "proto/convert/sampling_proto.h"
#include "router/decode_stream.h"
#include "router/generate_driver_internal.h"
#include "router/kv_watch_stream.h"
#include "router/retry_policy.h"
#include "serving/grpc_status.h"
#include "serving/request_id.h"

namespace tandem::generate_internal {

void Driver::PipelinedDecode(RequestState& state) {
  ++pipelined_;
  provenance_.mode = "pipelined";
  if (deps_.metrics != nullptr) deps_.metrics->pipelined_requests->Increment();
  absl::StatusOr<NodeLease> node = PickNode(v1::INSTANCE_ROLE_DECODE, failed_decode_);
  if (!node.ok()) {
    ReleaseKv();
    state.Fail(node.status());
    return;
  }
  const PrefillPlan plan = state.NextPrefill();
  v1::DecodeRequest request;
  request.set_request_id(kv_->handle.request_id());
  request.set_pipelined(true);
  // Not a token: a decode node that predates pipelining (and ignores `pipelined`) refuses the
  // call (INVALID_ARGUMENT) instead of pulling KV that is still being computed.
  request.set_first_token(-1);
  *request.mutable_kv() = kv_->handle;
  *request.mutable_sampling() = ToProto(prepared_.sampling);
  request.set_max_new_tokens(plan.max_new_tokens);
  request.mutable_stop_ids()->Add(prepared_.stop_ids.begin(), prepared_.stop_ids.end());
  request.set_next_step(plan.sample_step + 1);
  if (NeedsContext(prepared_.sampling)) {
    request.mutable_context_ids()->Add(plan.prompt_ids.begin(), plan.prompt_ids.end());
  }

  // The wait for the first event includes the prompt's prefill: bounded like a colocated call.
  const absl::Duration idle = deps_.options.decode_idle_timeout;
  const absl::Time deadline = std::min(
      client_deadline_, absl::Now() + deps_.options.rpc_timeout + idle * (plan.max_new_tokens + 1));
  const absl::Time called = absl::Now();
  absl::Time first_event = absl::InfinitePast();
  absl::Cleanup timed = [&] {
    const absl::Time now = absl::Now();
    if (first_event == absl::InfinitePast()) {
      prefill_time_ += now - called;
    } else {
      prefill_time_ += first_event - called;
      decode_time_ += now - first_event;
    }
  };
  DecodeStream stream(node->channel(), std::move(request), deadline, request_id_);
  CallCanceller::Registration registration(canceller_, stream.context());
  // The first token comes from the prefill: watched here too, it reaches the client as soon as the
  // prefill samples it, not after the decode node has pulled the last chunk. A watch that fails
  // only loses that head start: the decode node's first event carries the same token.
  std::optional<KvWatchStream> watch;
  {
    v1::WatchKvRequest w;
    w.set_request_id(kv_->handle.request_id());
    w.set_generation(kv_->handle.generation());
    watch.emplace(kv_->channel, std::move(w), deadline, request_id_);
  }
  std::optional<int32_t> prefill_token;  // the first token, once the watch has it
  bool decode_took_kv = false;           // the decode node's first event arrived
  // The decode node's first event waits for the whole prefill and the last pull.
  const absl::Time first_by = std::min(deadline, called + deps_.options.rpc_timeout + idle);
  absl::Status failure;
  while (true) {
    while (watch.has_value() && !prefill_token.has_value()) {
      KvWatchStream::ReadResult w = watch->Read(absl::ZeroDuration());
      if (w.kind == KvWatchStream::ReadResult::Kind::kIdle) break;
      if (w.kind == KvWatchStream::ReadResult::Kind::kEnd) {
        watch.reset();
        break;
      }
      if (!w.message.done()) continue;
      prefill_token = w.message.first_token();
      watch.reset();
      first_event = absl::Now();
      const int32_t index = static_cast<int32_t>(state.streamed().size());
      if (const std::optional<int32_t> token = state.OnPrefillOk(*prefill_token)) {
        SendToken(*token, index,
                  w.message.has_first_logprobs() ? &w.message.first_logprobs() : nullptr);
      }
      if (state.phase() != RequestPhase::kDecode) {
        // Done at the first token (a stop id, or max_tokens 1): stop the decode call (the decode
        // node then releases the KV) and release it here too, in case it had not taken it yet.
        stream.context()->TryCancel();
        state.OnKvReleased();
        ReleaseKv();
        return;
      }
    }
    absl::Duration wait = idle;
    if (!decode_took_kv) {
      const absl::Duration left = first_by - absl::Now();
      if (left <= absl::ZeroDuration()) {
        failure = absl::DeadlineExceededError(
            absl::StrCat("pipelined decode node sent no first event within ",
                         absl::ToInt64Milliseconds(deps_.options.rpc_timeout + idle),
                         " ms (rpc timeout + decode idle timeout)"));
        break;
      }
      wait = watch.has_value() ? std::min(kWatchPoll, left) : left;
    }
    DecodeStream::ReadResult next = stream.Read(wait);
    if (next.kind == DecodeStream::ReadResult::Kind::kIdle && !decode_took_kv) continue;
    if (next.kind == DecodeStream::ReadResult::Kind::kEvent) {
      if (next.event.has_served()) NoteServed(node->address(), next.event.served());
      if (next.event.has_finish()) {
        transfer_time_ += absl::Microseconds(next.event.finish().transfer_us());
      }
      if (!decode_took_kv) {
        // The decode node's first event: it has pulled the whole prompt and released the lease.
        if (!next.event.has_token()) {
          failure = absl::InternalError("pipelined decode node sent no first token");
          break;
        }
        decode_took_kv = true;
        kv_.reset();
        watch.reset();
        if (prefill_token.has_value()) {
          state.OnKvReleased();
          if (next.event.token() != *prefill_token) {
            failure = absl::InternalError(
                absl::StrCat("pipelined decode node's first token ", next.event.token(),
                             " differs from the prefill's ", *prefill_token));
            break;
          }
          continue;
        }
        first_event = absl::Now();
        const int32_t index = static_cast<int32_t>(state.streamed().size());
        if (const std::optional<int32_t> token = state.OnPrefillOk(next.event.token())) {
          SendToken(*token, index, next.event.has_logprobs() ? &next.event.logprobs() : nullptr);
        }
        state.OnKvReleased();
        if (state.phase() == RequestPhase::kDecode) continue;
        // Done at the first token (a stop id, or max_tokens 1): collect the finish event and the
        // status so the node sees a clean end.
        for (int i = 0; i < 2 && stream.Read(idle).kind == DecodeStream::ReadResult::Kind::kEvent;
             ++i) {
        }
        return;
      }
      if (OnDecodeEvent(state, next.event)) continue;
      if (next.event.has_finish()) stream.Read(idle);
      return;
    }
    failure = StreamEndFailure(next, idle);
    break;
  }
  if (canceller_->cancelled()) {
    if (kv_.has_value()) ReleaseKv();
    state.OnKvReleased();
    state.Fail(absl::CancelledError("request cancelled by the client"));
    return;
  }
  failure = NodeSideCancelAsUnavailable(failure);
  const bool retryable = IsRetryableDecodeError(failure.code());
  const bool blames_prefill =
      retryable && kv_.has_value() &&
      BlamesPrefillSource(failure, kv_->handle.prefill_address(), kv_->handle.engine_id());
  absl::Status error;
  v1::InstanceRole blamed = v1::INSTANCE_ROLE_DECODE;
  std::string blamed_node = node->address();
  if (blames_prefill) {
    blamed = v1::INSTANCE_ROLE_PREFILL;
    blamed_node = kv_->node;
    // The decode node could not get the KV from the prefill node: that one is to avoid.
    failed_prefill_.insert(kv_->node);
    if (failure.code() == absl::StatusCode::kUnavailable) {
      deps_.pool->ReportFailure(kv_->node, v1::INSTANCE_ROLE_PREFILL, failure);
    }
    error = absl::Status(failure.code(),
                         absl::StrCat("prefill node ", kv_->node, " (as decode node ",
                                      node->address(), " reports): ", failure.message()));
  } else {
    if (retryable) failed_decode_.insert(node->address());
    error = NodeError(v1::INSTANCE_ROLE_DECODE, node->address(), failure, retryable);
  }
  if (state.phase() == RequestPhase::kPrefill) {
    // Before the first token the request is prefilled again whatever broke (a decode-side stream
    // error included), as an unpipelined request whose prefill failed.
    ReleaseKv();  // cancels the prefill if it still runs
    // The KV never reached the decode node: recovering prefills it again.
    if (retryable && StrictStops(state, Recovery::kReprefill, error)) return;
    if (retryable && !IsRetryablePrefillError(error.code())) {
      error = absl::UnavailableError(error.message());
    }
    state.OnPrefillFailed(error);
    if (retryable) NoteRecovery(state, blamed, blamed_node, error, Recovery::kReprefill);
    if (retryable && state.phase() != RequestPhase::kFailed && deps_.metrics != nullptr) {
      deps_.metrics->prefill_retries->Increment();
    }
    return;
  }
  // After the first token (from the watch or the decode's first event): a decode failure,
  // resumed; the run loop releases the KV if the decode node never took it.
  const Recovery recovery = decode_took_kv ? Recovery::kResume : Recovery::kReprefill;
  if (retryable && StrictStops(state, recovery, error)) return;
  state.OnDecodeFailed(error);
  if (retryable) NoteRecovery(state, blamed, blamed_node, error, recovery);
  if (retryable && state.phase() != RequestPhase::kFailed) {
    ++resumes_;
    if (deps_.metrics != nullptr) deps_.metrics->decode_resumes->Increment();
  }
}

}  // namespace tandem::generate_internal
