#include "router/generate_driver.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/kv_source_failure.h"
#include "common/request_log.h"
#include "model/tokenizer/streaming_decoder.h"
#include "proto/convert/finish_reason_proto.h"
#include "proto/convert/sampling_proto.h"
#include "router/decode_stream.h"
#include "router/generate_driver_internal.h"
#include "router/prefix_match.h"
#include "router/request_prep.h"
#include "router/request_state.h"
#include "router/retry_policy.h"
#include "router/unary_call.h"
#include "router/unknown_proto_fields.h"
#include "serving/grpc_status.h"
#include "serving/request_id.h"
#include "tandem/v1/prefill.grpc.pb.h"

namespace tandem {
namespace {

// Random per router process: node request ids from two routers never coincide.
uint32_t RouterNonce() {
  static const uint32_t nonce = [] {
    std::random_device rd;
    return static_cast<uint32_t>(rd());
  }();
  return nonce;
}

}  // namespace

namespace generate_internal {

// Why a decode stream ended before its finish event: nothing within the idle timeout, a clean
// end without a finish, or the call's error.
absl::Status StreamEndFailure(const DecodeStream::ReadResult& next, absl::Duration idle) {
  if (next.kind == DecodeStream::ReadResult::Kind::kIdle) {
    return absl::DeadlineExceededError(absl::StrCat(
        "no decode event for ", absl::ToInt64Milliseconds(idle), " ms (decode idle timeout)"));
  }
  if (next.status.ok()) return absl::UnknownError("decode stream ended without a finish event");
  return FromGrpcStatus(next.status);
}

// A node call that ends CANCELLED while the client has not cancelled was cancelled by the node
// (its server shutting down as it drains, or its process going away): the node is unavailable,
// which the retry policy treats as such, rather than a cancellation to hand to the client.
absl::Status NodeSideCancelAsUnavailable(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kCancelled) return status;
  return WithPayloadsOf(
      absl::UnavailableError(absl::StrCat("node cancelled the call: ", status.message())), status);
}

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
  if (retryable &&
      BlamesPrefillSource(failure, kv_->handle.prefill_address(), kv_->handle.engine_id())) {
    // The decode node could not reach the prefill node holding the KV: that prefill node is the
    // one to avoid (and to report), not the decode node that told us.
    failed_prefill_.insert(kv_->node);
    if (failure.code() == absl::StatusCode::kUnavailable) {
      deps_.pool->ReportFailure(kv_->node, v1::INSTANCE_ROLE_PREFILL, failure);
    }
    return {
        absl::Status(failure.code(), absl::StrCat("prefill node ", kv_->node, " (as decode node ",
                                                  decode_node, " reports): ", failure.message())),
        v1::INSTANCE_ROLE_PREFILL, kv_->node};
  }
  if (retryable) failed_decode_.insert(decode_node);
  return {NodeError(v1::INSTANCE_ROLE_DECODE, decode_node, failure, retryable),
          v1::INSTANCE_ROLE_DECODE, decode_node};
}

std::string Driver::NodeRequestId() const {
  // A resumed request must not collide with a lease its earlier attempt may still hold.
  return node_calls_ == 0 ? node_request_id_ : absl::StrCat(node_request_id_, "/", node_calls_);
}

std::string LayoutNameOf(const v1::KvLayout& layout) {
  const v1::ParallelConfig& p = layout.parallel();
  return LayoutName(p.tp(), p.pcp(), p.dcp(), p.interleave(), p.block_size());
}

void Driver::NoteServed(const std::string& node, const v1::DecodeServed& served) {
  DecodeHop hop{node, LayoutNameOf(served.layout()), served.colocated(), served.kv_bytes(),
                served.digests_verified()};
  if (served.colocated()) provenance_.prefill.push_back(PrefillHop{node, hop.layout});
  provenance_.decode.push_back(std::move(hop));
}

bool Driver::StrictStops(RequestState& state, Recovery recovery, const absl::Status& error) {
  if (!provenance_.strict || !StrictRefuses(recovery)) return false;
  // A decode node that failed after the last token recovers nothing: the request just ends.
  if (state.phase() == RequestPhase::kDecode &&
      static_cast<int32_t>(state.streamed().size()) >= state.max_tokens()) {
    return false;
  }
  provenance_.refused = std::string(RecoveryName(recovery));
  state.Fail(StrictRefusal(recovery, error));
  return true;
}

void Driver::NoteRecovery(const RequestState& state, v1::InstanceRole role, const std::string& node,
                          const absl::Status& error, Recovery recovery) {
  if (state.phase() != RequestPhase::kPrefill) return;
  provenance_.failures.push_back(NodeFailure{std::string(RoleName(role)), node,
                                             absl::StatusCodeToString(error.code()), recovery});
}

absl::Status Driver::NodeError(v1::InstanceRole role, const std::string& node,
                               const absl::Status& s, bool retryable) {
  if (s.code() == absl::StatusCode::kUnavailable) deps_.pool->ReportFailure(node, role, s);
  if (!retryable) return s;
  return absl::Status(s.code(), absl::StrCat(RoleName(role), " node ", node, ": ", s.message()));
}

void Driver::SendToken(int32_t id, int32_t index, const v1::TokenLogprobs* logprobs) {
  v1::GenerateResponse response;
  v1::TokenChunk* chunk = response.mutable_token();
  chunk->set_id(id);
  if (logprobs != nullptr) *chunk->mutable_logprobs() = *logprobs;
  chunk->set_text(choice_ != nullptr ? choice_->detokenizer->Push(id) : detokenizer_->Push(id));
  chunk->set_index(index);
  if (choice_ != nullptr) chunk->set_choice(choice_->index);
  const absl::Time now = absl::Now();
  if (first_token_at_ == absl::InfinitePast()) {
    sink_->OnProvenance(provenance_);  // before the token: an HTTP stream's headers carry it
    first_token_at_ = now;
    if (deps_.metrics != nullptr) {
      deps_.metrics->time_to_first_token->Observe(absl::ToDoubleSeconds(now - start_));
    }
  } else if (deps_.metrics != nullptr) {
    deps_.metrics->inter_token_latency->Observe(absl::ToDoubleSeconds(now - last_token_at_));
  }
  last_token_at_ = now;
  sink_->Send(std::move(response));
}

absl::StatusOr<NodeLease> Driver::PickNode(v1::InstanceRole role,
                                           const absl::flat_hash_set<std::string>& excluded,
                                           PromptPrefixHashes* prompt) {
  absl::StatusOr<NodeLease> first = deps_.pool->Pick(role, excluded, prompt);
  if (first.ok() || first.status().code() != absl::StatusCode::kUnavailable) return first;
  absl::Status none = first.status();
  const absl::Time began = absl::Now();
  const absl::Time give_up = WaitDeadline(deps_.options.retry, began, client_deadline_);
  while (absl::Now() < give_up) {
    if (canceller_->cancelled()) return absl::CancelledError("request cancelled by the client");
    deps_.pool->AwaitHealthy(role, std::min(give_up, absl::Now() + kWaitSlice));
    absl::StatusOr<NodeLease> node = deps_.pool->Pick(role, excluded, prompt);
    if (node.ok()) {
      deps_.log(absl::StrCat("request ", request_id_, ": waited ",
                             absl::ToInt64Milliseconds(absl::Now() - began), " ms for a healthy ",
                             RoleName(role), " node"));
      return node;
    }
    if (node.status().code() != absl::StatusCode::kUnavailable) return node;
    none = node.status();
  }
  return absl::UnavailableError(absl::StrCat(none.message(), "; waited ",
                                             absl::ToInt64Milliseconds(absl::Now() - began),
                                             " ms for one to become healthy"));
}

bool Driver::Backoff(int failures) {
  const absl::Time until =
      NextAttemptAt(deps_.options.retry, failures, absl::Now(), client_deadline_);
  while (absl::Now() < until) {
    if (canceller_->cancelled()) return false;
    absl::SleepFor(std::min(until - absl::Now(), kWaitSlice));
  }
  return !canceller_->cancelled();
}

void Driver::Prefill(RequestState& state, bool pipelined) {
  // Scored by the original prompt: a resumed prefill's extra (generated) tokens are in no cache.
  absl::StatusOr<NodeLease> node =
      PickNode(v1::INSTANCE_ROLE_PREFILL, failed_prefill_, &*prompt_hashes_);
  if (!node.ok()) {
    state.Fail(node.status());
    return;
  }
  cached_prefix_tokens_ = node->cached_prefix_tokens();
  const PrefillPlan plan = state.NextPrefill();
  if (deps_.metrics != nullptr) {
    deps_.metrics->prefill_prompt_tokens->Increment(static_cast<double>(plan.prompt_ids.size()));
    deps_.metrics->prefill_expected_cached_tokens->Increment(
        static_cast<double>(cached_prefix_tokens_));
  }
  v1::PrefillRequest request;
  const std::string node_request_id = NodeRequestId();
  request.set_request_id(node_request_id);
  request.mutable_prompt_ids()->Add(plan.prompt_ids.begin(), plan.prompt_ids.end());
  *request.mutable_sampling() = ToProto(prepared_.sampling);
  request.set_sample_step(plan.sample_step);
  request.set_max_new_tokens(plan.max_new_tokens);
  request.set_early_handle(pipelined);
  if (prefill_choices_) request.set_n(static_cast<int32_t>(choices_.size()));
  ++node_calls_;

  const absl::Time call_deadline = UnaryDeadline();
  UnaryCall<v1::PrefillRequest, v1::PrefillResponse> call(std::move(request), call_deadline);
  SetRequestIdMetadata(call.context(), request_id_);
  const absl::Time called = absl::Now();
  auto stub = v1::PrefillService::NewStub(node->channel());
  call.Start([&stub](auto* ctx, auto* req, auto* resp, auto done) {
    stub->async()->Prefill(ctx, req, resp, std::move(done));
  });
  absl::StatusOr<v1::PrefillResponse> response;
  {
    CallCanceller::Registration registration(canceller_, call.context());
    response = call.Wait();
  }
  prefill_time_ += absl::Now() - called;
  if (!response.ok()) {
    // The node may have answered as the call ended: its lease would wait for --lease_ms. (A call
    // started past its deadline — a retry after the client's deadline — never reached the node.)
    if (deps_.kv_releaser != nullptr && called < call_deadline &&
        PrefillMayHaveLeased(response.status().code(), canceller_->cancelled())) {
      deps_.kv_releaser->ReleaseRequest(node->channel(), node->address(), node_request_id,
                                        request_id_);
    }
    if (canceller_->cancelled()) {
      state.Fail(absl::CancelledError("request cancelled by the client"));
      return;
    }
    const absl::Status error = NodeSideCancelAsUnavailable(response.status());
    const bool retryable = IsRetryablePrefillError(error.code());
    if (retryable) failed_prefill_.insert(node->address());
    state.OnPrefillFailed(NodeError(v1::INSTANCE_ROLE_PREFILL, node->address(), error, retryable));
    if (retryable) {
      NoteRecovery(state, v1::INSTANCE_ROLE_PREFILL, node->address(), error,
                   Recovery::kPrefillRetry);
    }
    if (retryable && state.phase() != RequestPhase::kFailed && deps_.metrics != nullptr) {
      deps_.metrics->prefill_retries->Increment();
    }
    return;
  }
  deps_.pool->NotePrefilled(node->address(), *prompt_hashes_, absl::Now());
  provenance_.prefill.push_back(PrefillHop{node->address(), LayoutNameOf(response->kv().layout())});
  kv_ = HeldKv{std::move(*response->mutable_kv()), node->address(), node->channel()};
  if (!prompt_cached_tokens_.has_value()) {
    prompt_cached_tokens_ = static_cast<int32_t>(std::clamp<int64_t>(
        response->cached_tokens(), 0, static_cast<int64_t>(prepared_.prompt.size())));
    provenance_.cached_tokens = *prompt_cached_tokens_;
    sink_->Prefilled(*prompt_cached_tokens_);
  }
  if (response->kv_pending()) {
    PipelinedDecode(state);
    return;
  }
  if (prefill_choices_) {  // every choice's, for PrefillAndDecodeChoices
    choice_first_tokens_.assign(response->choice_first_tokens().begin(),
                                response->choice_first_tokens().end());
    choice_first_logprobs_.assign(response->choice_first_logprobs().begin(),
                                  response->choice_first_logprobs().end());
  }
  const int32_t index = static_cast<int32_t>(state.streamed().size());
  if (const std::optional<int32_t> token = state.OnPrefillOk(response->first_token())) {
    SendToken(*token, index,
              response->has_first_logprobs() ? &response->first_logprobs() : nullptr);
  }
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

  const absl::Duration idle = deps_.options.decode_idle_timeout;
  const absl::Time deadline = std::min(
      client_deadline_, absl::Now() + deps_.options.rpc_timeout + idle * (plan.max_new_tokens + 1));
  const absl::Time called = absl::Now();
  absl::Cleanup timed = [this, called] { decode_time_ += absl::Now() - called; };
  DecodeStream stream(node->channel(), std::move(request), deadline, request_id_);
  CallCanceller::Registration registration(canceller_, stream.context());
  absl::Status failure;
  while (true) {
    DecodeStream::ReadResult next = stream.Read(idle);
    if (next.kind == DecodeStream::ReadResult::Kind::kEvent) {
      if (next.event.has_served()) NoteServed(node->address(), next.event.served());
      if (next.event.has_finish()) {
        transfer_time_ += absl::Microseconds(next.event.finish().transfer_us());
      }
      if (OnDecodeEvent(state, next.event)) continue;
      if (next.event.has_finish()) {
        // Collect the final status so the node sees a clean end rather than a cancellation.
        stream.Read(idle);
      }
      return;
    }
    failure = StreamEndFailure(next, idle);
    break;
  }
  if (canceller_->cancelled()) {
    state.Fail(absl::CancelledError("request cancelled by the client"));
    return;
  }
  failure = NodeSideCancelAsUnavailable(failure);
  const bool retryable = IsRetryableDecodeError(failure.code());
  // The decode node never took the KV (no event yet): the transfer failed, and recovering means
  // prefilling again; after its tokens, resuming elsewhere.
  const Recovery recovery = state.kv_to_release() ? Recovery::kReprefill : Recovery::kResume;
  const auto [error, blamed, blamed_node] = BlameDecodeFailure(node->address(), failure, retryable);
  if (retryable && StrictStops(state, recovery, error)) return;
  state.OnDecodeFailed(error);
  if (retryable) NoteRecovery(state, blamed, blamed_node, error, recovery);
  if (retryable && state.phase() != RequestPhase::kFailed) {
    ++resumes_;
    if (deps_.metrics != nullptr) deps_.metrics->decode_resumes->Increment();
  }
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
  absl::Status failure;
  while (true) {
    DecodeStream::ReadResult next = stream.Read(idle);
    if (next.kind == DecodeStream::ReadResult::Kind::kEvent) {
      if (next.event.has_served()) NoteServed(node->address(), next.event.served());
      if (first_event == absl::InfinitePast()) {
        first_event = absl::Now();
        if (!next.event.has_token()) {
          failure = absl::InternalError("colocated decode node sent no first token");
          break;
        }
        const int32_t index = static_cast<int32_t>(state.streamed().size());
        if (const std::optional<int32_t> token = state.OnPrefillOk(next.event.token())) {
          SendToken(*token, index, next.event.has_logprobs() ? &next.event.logprobs() : nullptr);
        }
        state.OnKvReleased();  // the KV never left the node
        if (state.phase() == RequestPhase::kDecode) continue;
        // Done at the first token (a stop id, or max_tokens 1): the node ends the stream with
        // its finish event; collect it and the status so it sees a clean end.
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
    state.Fail(absl::CancelledError("request cancelled by the client"));
    return;
  }
  failure = NodeSideCancelAsUnavailable(failure);
  if (state.phase() == RequestPhase::kPrefill) {
    const bool retryable = IsRetryablePrefillError(failure.code());
    if (retryable) failed_decode_.insert(node->address());
    const absl::Status error =
        NodeError(v1::INSTANCE_ROLE_DECODE, node->address(), failure, retryable);
    state.OnPrefillFailed(error);
    if (retryable) {
      NoteRecovery(state, v1::INSTANCE_ROLE_DECODE, node->address(), error,
                   Recovery::kPrefillRetry);
    }
    if (retryable && state.phase() != RequestPhase::kFailed && deps_.metrics != nullptr) {
      deps_.metrics->prefill_retries->Increment();
    }
    return;
  }
  const bool retryable = IsRetryableDecodeError(failure.code());
  if (retryable) failed_decode_.insert(node->address());
  const absl::Status error =
      NodeError(v1::INSTANCE_ROLE_DECODE, node->address(), failure, retryable);
  if (retryable && StrictStops(state, Recovery::kResume, error)) return;
  state.OnDecodeFailed(error);
  if (retryable) {
    NoteRecovery(state, v1::INSTANCE_ROLE_DECODE, node->address(), error, Recovery::kResume);
  }
  if (retryable && state.phase() != RequestPhase::kFailed) {
    ++resumes_;
    if (deps_.metrics != nullptr) deps_.metrics->decode_resumes->Increment();
  }
}

void Driver::ReleaseKv() {
  v1::ReleaseKvRequest request;
  request.set_request_id(kv_->handle.request_id());
  request.set_epoch(kv_->handle.epoch());
  request.set_generation(kv_->handle.generation());
  // Not bounded by the client: a cancelled client is exactly when the blocks must be freed.
  UnaryCall<v1::ReleaseKvRequest, v1::ReleaseKvResponse> call(
      std::move(request), absl::Now() + deps_.options.rpc_timeout);
  SetRequestIdMetadata(call.context(), request_id_);
  auto stub = v1::PrefillService::NewStub(kv_->channel);
  call.Start([&stub](auto* ctx, auto* req, auto* resp, auto done) {
    stub->async()->ReleaseKv(ctx, req, resp, std::move(done));
  });
  const absl::StatusOr<v1::ReleaseKvResponse> response = call.Wait();
  if (!response.ok()) {
    deps_.log(absl::StrCat("request ", request_id_, ": ReleaseKv on prefill node ", kv_->node,
                           " failed (its lease will expire): ", response.status().ToString()));
  }
  kv_.reset();
}

void Driver::LogEnd(const RequestState* state, const absl::Status& status) {
  const absl::Duration total = absl::Now() - start_;
  const bool done = status.ok() && state != nullptr && state->phase() == RequestPhase::kDone;
  const std::string finish_reason =
      done ? std::string(FinishReasonName(state->finish_reason())) : "";
  RequestLogLine line;
  line.Add("request_id", request_id_)
      .Add("outcome", status.ok() ? "OK" : absl::StatusCodeToString(status.code()));
  if (done) line.Add("finish_reason", finish_reason);
  line.Add("prompt_tokens", static_cast<int64_t>(prepared_.prompt.size()))
      .Add("generated_tokens",
           static_cast<int64_t>(state != nullptr ? state->streamed().size() : 0))
      .AddMillis("prefill_ms", prefill_time_)
      .AddMillis("transfer_ms", transfer_time_)
      .AddMillis("decode_ms", decode_time_)
      .AddMillis("ttft_ms", first_token_at_ == absl::InfinitePast() ? absl::ZeroDuration()
                                                                    : first_token_at_ - start_)
      .AddMillis("total_ms", total)
      .Add("retries", state != nullptr ? state->retries() : 0)
      .Add("resumes", resumes_)
      .Add("cached_prefix_tokens", cached_prefix_tokens_);
  if (pipelined_ > 0) line.Add("pipelined_calls", pipelined_);
  if (!status.ok()) line.Add("error", status.message());
  deps_.log(line.str());
  if (deps_.metrics == nullptr) return;
  if (status.ok()) {
    if (done) deps_.metrics->request_success->WithLabels({finish_reason}).Increment();
    deps_.metrics->e2e_request_latency->Observe(absl::ToDoubleSeconds(total));
  } else {
    deps_.metrics->RecordFailure(absl::StatusCodeToString(status.code()));
  }
}

void Driver::Serve(RequestState& state) {
  while (state.phase() == RequestPhase::kPrefill || state.phase() == RequestPhase::kDecode) {
    if (canceller_->cancelled()) {
      state.Fail(absl::CancelledError("request cancelled by the client"));
      break;
    }
    if (state.kv_to_release() && state.phase() == RequestPhase::kPrefill) {
      ReleaseKv();
      state.OnKvReleased();
    }
    const int failures = state.retries();
    if (deps_.options.colocated) {
      Colocated(state);
    } else if (state.phase() == RequestPhase::kPrefill) {
      // A resume prefills the prompt and the tokens streamed so far: unpipelined, as its
      // sampled token is ignored (request_state.h). Logprobs stay pipelined: the prefill's
      // final progress message carries the first token's.
      Prefill(state, deps_.options.pipelined_transfer && state.streamed().empty());
    } else {
      Decode(state);
    }
    // A retryable failure: back off before the next attempt (no node is hammered while it
    // recovers; PickNode then waits for one to be healthy).
    if (state.retries() > failures &&
        (state.phase() == RequestPhase::kPrefill || state.phase() == RequestPhase::kDecode) &&
        !Backoff(state.retries())) {
      state.Fail(absl::CancelledError("request cancelled by the client"));
    }
  }
}

grpc::Status Driver::Run(const v1::GenerateRequest& request) {
  if (deps_.metrics != nullptr) deps_.metrics->requests_running->Add(1);
  absl::Cleanup not_running = [this] {
    if (deps_.metrics != nullptr) deps_.metrics->requests_running->Add(-1);
  };
  request_id_ = request.request_id();
  if (request_id_.empty()) {
    request_id_ = absl::StrCat("req-", absl::Hex(absl::ToUnixMicros(start_)), "-",
                               deps_.request_counter->fetch_add(1));
    node_request_id_ = request_id_;
  } else {
    // A client's id may repeat (two concurrent requests, or two routers given the same id): the
    // nodes get it with this router's nonce and a sequence number; logs keep the client's id
    // (x-request-id metadata).
    node_request_id_ = absl::StrCat(request_id_, "#", absl::Hex(RouterNonce()), "-",
                                    deps_.request_counter->fetch_add(1));
  }
  // A field this router does not know is refused, never ignored (unknown_proto_fields.h).
  const absl::Status unknown = RefuseUnknownFields(request);
  absl::StatusOr<PreparedRequest> prepared = unknown.ok()
                                                 ? PrepareRequest(*deps_.model, request)
                                                 : absl::StatusOr<PreparedRequest>(unknown);
  provenance_.strict = deps_.options.strict || request.strict();
  if (deps_.options.colocated) provenance_.mode = "colocated";
  if (!prepared.ok()) {
    LogEnd(nullptr, prepared.status());
    provenance_.final = true;
    sink_->OnProvenance(provenance_);
    return ToGrpcStatus(prepared.status());
  }
  prepared_ = *std::move(prepared);
  prompt_hashes_.emplace(prepared_.prompt);
  detokenizer_.emplace(deps_.model->tokenizer(), /*skip_special=*/true);

  if (prepared_.n > 1) return RunChoices();

  RequestState state(prepared_.prompt, prepared_.max_tokens, prepared_.stop_ids,
                     deps_.options.max_attempts);
  Serve(state);
  if (state.kv_to_release()) {
    ReleaseKv();
    state.OnKvReleased();
  }
  provenance_.final = true;
  if (state.phase() == RequestPhase::kFailed) {
    LogEnd(&state, state.error());
    sink_->OnProvenance(provenance_);
    return ToGrpcStatus(state.error());
  }

  v1::GenerateResponse response;
  v1::GenerateFinal* final = response.mutable_final();
  final->set_finish_reason(std::string(FinishReasonName(state.finish_reason())));
  final->mutable_usage()->set_prompt_tokens(static_cast<int32_t>(prepared_.prompt.size()));
  final->mutable_usage()->set_completion_tokens(static_cast<int32_t>(state.streamed().size()));
  final->mutable_usage()->set_cached_tokens(prompt_cached_tokens_.value_or(0));
  final->set_request_id(request_id_);
  final->set_text_tail(detokenizer_->Flush());
  final->set_retries(state.retries());
  if (first_token_at_ != absl::InfinitePast()) {
    final->set_ttft_us(absl::ToInt64Microseconds(first_token_at_ - start_));
  }
  final->set_total_us(absl::ToInt64Microseconds(absl::Now() - start_));
  sink_->Send(std::move(response));
  sink_->OnProvenance(provenance_);
  LogEnd(&state, absl::OkStatus());
  return grpc::Status::OK;
}

}  // namespace generate_internal

grpc::Status RunGenerate(const RouterDeps& deps, const v1::GenerateRequest& request,
                         absl::Time client_deadline, CallCanceller* canceller, GenerateSink* sink) {
  if (deps.draining != nullptr && deps.draining->load()) {
    if (deps.metrics != nullptr) deps.metrics->RecordFailure("UNAVAILABLE");
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "router is draining (shutting down): no new requests");
  }
  if (deps.in_flight != nullptr) {
    const int64_t running = deps.in_flight->fetch_add(1) + 1;
    absl::Cleanup leave = [&deps] { deps.in_flight->fetch_sub(1); };
    if (deps.max_in_flight > 0 && running > deps.max_in_flight) {
      // Counted, not logged: a flood of refusals must not flood the log too.
      if (deps.metrics != nullptr) deps.metrics->RecordFailure("RESOURCE_EXHAUSTED");
      return grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("router is at its limit of ", deps.max_in_flight,
                       " requests in flight (--max_requests_in_flight); retry later"));
    }
    generate_internal::Driver driver(deps, client_deadline, canceller, sink);
    return driver.Run(request);
  }
  generate_internal::Driver driver(deps, client_deadline, canceller, sink);
  return driver.Run(request);
}

}  // namespace tandem
