// The one-sequence Decode calls (generate_driver_internal.h): the plain call after a prefill and
// the colocated call that prefills on the decode node, both run by RunDecodeCall (decode_call.h),
// and what a failed Decode call means for the request (blame, strict mode, retry or resume).
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/convert/finish_reason_proto.h"
#include "proto/convert/sampling_proto.h"
#include "router/decode_call.h"
#include "router/generate_driver_internal.h"
#include "router/retry_policy.h"

namespace tandem::generate_internal {

v1::DecodeRequest Driver::DecodeRequestFor(const DecodePlan& plan) const {
  v1::DecodeRequest request;
  request.set_request_id(kv_->handle.request_id().empty() ? NodeRequestId()
                                                          : kv_->handle.request_id());
  request.set_first_token(plan.first_token);
  *request.mutable_kv() = kv_->handle;
  *request.mutable_sampling() = ToProto(prepared_.sampling);
  request.set_max_new_tokens(plan.max_new_tokens);
  request.mutable_stop_ids()->Add(prepared_.stop_ids.begin(), prepared_.stop_ids.end());
  request.set_next_step(plan.next_step);
  return request;
}

Driver::DecodeBlame Driver::BlameDecodeFailure(const std::string& decode_node,
                                               const absl::Status& failure, bool retryable) {
  if (retryable && kv_.has_value() &&
      BlamesPrefillSource(failure, kv_->handle.prefill_address(), kv_->handle.engine_id())) {
    // The decode node could not reach the prefill node holding the KV: that prefill node is the
    // one to avoid (and to report), not the decode node that told us.
    const std::string& prefill_node = kv_->node.address;
    failed_prefill_.insert(prefill_node);
    if (failure.code() == absl::StatusCode::kUnavailable) {
      deps_.pool->ReportFailure(prefill_node, v1::INSTANCE_ROLE_PREFILL, failure);
    }
    return {absl::Status(failure.code(),
                         absl::StrCat("prefill node ", prefill_node, " (as decode node ",
                                      decode_node, " reports): ", failure.message())),
            v1::INSTANCE_ROLE_PREFILL, prefill_node};
  }
  if (retryable) failed_decode_.insert(decode_node);
  return {NodeError(v1::INSTANCE_ROLE_DECODE, decode_node, failure, retryable),
          v1::INSTANCE_ROLE_DECODE, decode_node};
}

void Driver::NoteServed(const std::string& node, const v1::DecodeServed& served) {
  DecodeHop hop{node, LayoutNameOf(served.layout()), served.colocated(), served.kv_bytes(),
                served.digests_verified()};
  if (served.colocated()) provenance_.prefill.push_back(PrefillHop{node, hop.layout});
  provenance_.decode.push_back(std::move(hop));
}

bool Driver::OnDecodeEvent(RequestState& state, const v1::DecodeEvent& event) {
  switch (event.event_case()) {
    case v1::DecodeEvent::kToken: {
      const int32_t token = event.token();
      if (const std::optional<int32_t> index = state.OnDecodeToken(token)) {
        SendToken(token, *index, event.has_logprobs() ? &event.logprobs() : nullptr);
      }
      return state.phase() == RequestPhase::kDecode;
    }
    case v1::DecodeEvent::kFinish: {
      // A finish event ends a successful stream, so only stop and length are valid there; a
      // node that says anything else is broken, and its request fails rather than guessing.
      const absl::StatusOr<FinishReason> reason = FromProto(event.finish().reason());
      if (reason.ok() && (*reason == FinishReason::kStop || *reason == FinishReason::kLength)) {
        state.OnDecodeFinished(*reason);
      } else {
        state.Fail(absl::InternalError(absl::StrCat(
            "decode node sent a finish event with reason ",
            reason.ok() ? std::string(FinishReasonName(*reason)) : reason.status().ToString())));
      }
      return false;
    }
    case v1::DecodeEvent::EVENT_NOT_SET:
      return true;
  }
  return true;
}

CallStep Driver::DecodeStep(RequestState& state, const v1::DecodeEvent& event) {
  if (OnDecodeEvent(state, event)) return CallStep::kRead;
  // A finish: collect the final status so the node sees a clean end rather than a
  // cancellation. The budget spent on a token: the call is stopped.
  return event.has_finish() ? CallStep::kFinish : CallStep::kCancel;
}

DecodeCallSpec Driver::DecodeCallTo(const NodeLease& node, v1::DecodeRequest request,
                                    int32_t max_new_tokens) const {
  DecodeCallSpec spec;
  spec.node = NodeRef{node.address(), node.channel()};
  spec.request = std::move(request);
  spec.idle = deps_.options.decode_idle_timeout;
  spec.deadline = std::min(client_deadline_, clock_->Now() + deps_.options.rpc_timeout +
                                                 spec.idle * (max_new_tokens + 1));
  spec.request_id = request_id_;
  return spec;
}

DecodeCallResult Driver::RunDecode(DecodeCallSpec spec, DecodeCallHooks hooks) {
  const std::string node = spec.node.address;
  auto served = [this, node](auto next) {
    return [this, node, next = std::move(next)](const v1::DecodeEvent& event) {
      if (event.has_served()) NoteServed(node, event.served());
      return next(event);
    };
  };
  hooks.on_event = served(std::move(hooks.on_event));
  if (hooks.on_first_event) hooks.on_first_event = served(std::move(hooks.on_first_event));
  return RunDecodeCall(*nodes_, *clock_, cancel_, std::move(spec), hooks);
}

void Driver::Decode(RequestState& state) {
  absl::StatusOr<NodeLease> node = PickNode(v1::INSTANCE_ROLE_DECODE, failed_decode_);
  if (!node.ok()) {
    state.Fail(node.status());
    return;
  }
  const DecodePlan plan = state.NextDecode();
  v1::DecodeRequest request = DecodeRequestFor(plan);
  if (NeedsContext(prepared_.sampling)) {
    // The KV's tokens: the prompt, then every streamed token but the last (first_token).
    request.mutable_context_ids()->Add(state.prompt().begin(), state.prompt().end());
    request.mutable_context_ids()->Add(state.streamed().begin(), state.streamed().end() - 1);
  }
  DecodeCallHooks hooks;
  hooks.on_event = [&](const v1::DecodeEvent& event) -> absl::StatusOr<CallStep> {
    if (event.has_finish()) transfer_time_ += absl::Microseconds(event.finish().transfer_us());
    return DecodeStep(state, event);
  };
  const absl::Time called = clock_->Now();
  const DecodeCallResult call =
      RunDecode(DecodeCallTo(*node, std::move(request), plan.max_new_tokens), std::move(hooks));
  decode_time_ += clock_->Now() - called;
  if (call.failure.ok()) return;
  OnDecodeCallFailed(state, node->address(), call.failure, NodeCall::kDecode);
}

void Driver::Colocated(RequestState& state) {
  if (state.phase() != RequestPhase::kPrefill) {
    state.Fail(absl::InternalError("colocated call outside the prefill phase"));
    return;
  }
  absl::StatusOr<NodeLease> node = PickNode(v1::INSTANCE_ROLE_DECODE, failed_decode_);
  if (!node.ok()) {
    state.Fail(node.status());
    return;
  }
  const PrefillPlan plan = state.NextPrefill();
  if (deps_.metrics != nullptr) {
    deps_.metrics->prefill_prompt_tokens->Increment(static_cast<double>(plan.prompt_ids.size()));
  }
  v1::DecodeRequest request;
  request.set_request_id(NodeRequestId());
  request.mutable_prompt_ids()->Add(plan.prompt_ids.begin(), plan.prompt_ids.end());
  if (plan.resume) {
    request.set_resume(true);
    request.set_first_token(state.streamed().back());
  }
  *request.mutable_sampling() = ToProto(prepared_.sampling);
  request.set_max_new_tokens(plan.max_new_tokens);
  request.mutable_stop_ids()->Add(prepared_.stop_ids.begin(), prepared_.stop_ids.end());
  request.set_next_step(plan.sample_step + 1);
  ++node_calls_;

  DecodeCallHooks hooks;
  // The first event is the prefill's token (on a resume the known g[k-1]).
  hooks.on_first_event = [&](const v1::DecodeEvent& event) -> absl::StatusOr<CallStep> {
    if (!event.has_token()) {
      return absl::InternalError("colocated decode node sent no first token");
    }
    const int32_t index = static_cast<int32_t>(state.streamed().size());
    if (const std::optional<int32_t> token = state.OnPrefillOk(event.token())) {
      SendToken(*token, index, event.has_logprobs() ? &event.logprobs() : nullptr);
    }
    state.OnKvReleased();  // the KV never left the node
    // Done at the first token (a stop id, or max_tokens 1): the node ends the stream with its
    // finish event; collect it and the status so it sees a clean end.
    return state.phase() == RequestPhase::kDecode ? CallStep::kRead : CallStep::kDrain;
  };
  hooks.on_event = [&](const v1::DecodeEvent& event) -> absl::StatusOr<CallStep> {
    return DecodeStep(state, event);
  };
  const absl::Time called = clock_->Now();
  const DecodeCallResult call =
      RunDecode(DecodeCallTo(*node, std::move(request), plan.max_new_tokens), std::move(hooks));
  const absl::Time now = clock_->Now();
  if (!call.first_event) {
    prefill_time_ += now - called;
  } else {
    prefill_time_ += call.first_event_at - called;
    decode_time_ += now - call.first_event_at;
  }
  if (call.failure.ok()) return;
  OnDecodeCallFailed(state, node->address(), call.failure, NodeCall::kColocated);
}

void Driver::OnDecodeCallFailed(RequestState& state, const std::string& node, absl::Status failure,
                                NodeCall call) {
  if (cancel_.cancelled()) {
    if (call == NodeCall::kPipelined) {
      // The prefill may still run (and hold the KV): release it now.
      if (kv_.has_value()) ReleaseKv();
      state.OnKvReleased();
    }
    state.Fail(absl::CancelledError("request cancelled by the client"));
    return;
  }
  failure = NodeSideCancelAsUnavailable(failure);
  const DecodeCallVerdict verdict = state.JudgeDecodeCallFailure(call, failure.code());
  auto [error, blamed, blamed_node] = BlameDecodeFailure(node, failure, verdict.retryable);
  if (verdict.release_kv_first) ReleaseKv();
  // A colocated call's prefill retry is never refused (StrictRefuses(kPrefillRetry) is false).
  if (verdict.retryable && StrictStops(state, verdict.recovery, error)) return;
  if (verdict.as_unavailable) error = absl::UnavailableError(error.message());
  if (verdict.as_prefill_failure) {
    state.OnPrefillFailed(error);
  } else {
    state.OnDecodeFailed(error);
  }
  if (!verdict.retryable) return;
  NoteRecovery(state, blamed, blamed_node, error, verdict.recovery);
  if (state.phase() == RequestPhase::kFailed) return;
  if (verdict.as_prefill_failure) {
    if (deps_.metrics != nullptr) deps_.metrics->prefill_retries->Increment();
  } else {
    ++resumes_;
    if (deps_.metrics != nullptr) deps_.metrics->decode_resumes->Increment();
  }
}

}  // namespace tandem::generate_internal
