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
#include "common/request_log.h"
#include "model/tokenizer/streaming_decoder.h"
#include "proto/convert/sampling_proto.h"
#include "router/generate_driver_internal.h"
#include "router/prefix_match.h"
#include "router/request_prep.h"
#include "router/request_state.h"
#include "router/retry_policy.h"
#include "router/unknown_proto_fields.h"
#include "serving/grpc_status.h"

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

std::string Driver::NodeRequestId() const {
  // A resumed request must not collide with a lease its earlier attempt may still hold.
  return node_calls_ == 0 ? node_request_id_ : absl::StrCat(node_request_id_, "/", node_calls_);
}

std::string LayoutNameOf(const v1::KvLayout& layout) {
  const v1::ParallelConfig& p = layout.parallel();
  return LayoutName(p.tp(), p.pcp(), p.dcp(), p.interleave(), p.block_size());
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
  GeneratedToken token;
  token.id = id;
  if (logprobs != nullptr) token.logprobs = FromProto(*logprobs);
  token.text = choice_ != nullptr ? choice_->detokenizer->Push(id) : detokenizer_->Push(id);
  token.index = index;
  if (choice_ != nullptr) token.choice = choice_->index;
  const absl::Time now = clock_->Now();
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
  sink_->OnToken(std::move(token));
}

absl::StatusOr<NodeLease> Driver::PickNode(v1::InstanceRole role,
                                           const absl::flat_hash_set<std::string>& excluded,
                                           PromptPrefixHashes* prompt) {
  absl::StatusOr<NodeLease> first = deps_.pool->Pick(role, excluded, prompt);
  if (first.ok() || first.status().code() != absl::StatusCode::kUnavailable) return first;
  absl::Status none = first.status();
  const absl::Time began = clock_->Now();
  const absl::Time give_up = WaitDeadline(deps_.options.retry, began, client_deadline_);
  while (clock_->Now() < give_up) {
    if (cancel_.cancelled()) return absl::CancelledError("request cancelled by the client");
    clock_->Wait(std::min(give_up - clock_->Now(), kWaitSlice), [&](absl::Time real_deadline) {
      deps_.pool->AwaitHealthy(role, real_deadline, &cancel_);
    });
    absl::StatusOr<NodeLease> node = deps_.pool->Pick(role, excluded, prompt);
    if (node.ok()) {
      deps_.log(absl::StrCat("request ", request_id_, ": waited ",
                             absl::ToInt64Milliseconds(clock_->Now() - began), " ms for a healthy ",
                             RoleName(role), " node"));
      return node;
    }
    if (node.status().code() != absl::StatusCode::kUnavailable) return node;
    none = node.status();
  }
  return absl::UnavailableError(absl::StrCat(none.message(), "; waited ",
                                             absl::ToInt64Milliseconds(clock_->Now() - began),
                                             " ms for one to become healthy"));
}

bool Driver::Backoff(int failures) {
  const absl::Time until =
      NextAttemptAt(deps_.options.retry, failures, clock_->Now(), client_deadline_);
  // Woken at once by a cancellation (a fake clock passes the time at once instead).
  while (clock_->Now() < until && !cancel_.cancelled()) {
    clock_->Wait(until - clock_->Now(),
                 [&](absl::Time real_deadline) { cancel_.WaitUntil(real_deadline); });
  }
  return !cancel_.cancelled();
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
  const absl::Time called = clock_->Now();
  absl::StatusOr<v1::PrefillResponse> response =
      nodes_->Prefill(NodeRef{node->address(), node->channel()}, std::move(request), call_deadline,
                      request_id_, &cancel_);
  prefill_time_ += clock_->Now() - called;
  if (!response.ok()) {
    // The node may have answered as the call ended: its lease would wait for --lease_ms. (A call
    // started past its deadline — a retry after the client's deadline — never reached the node.)
    if (deps_.kv_releaser != nullptr && called < call_deadline &&
        PrefillMayHaveLeased(response.status().code(), cancel_.cancelled())) {
      deps_.kv_releaser->ReleaseRequest(node->channel(), node->address(), node_request_id,
                                        request_id_);
    }
    if (cancel_.cancelled()) {
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
  deps_.pool->NotePrefilled(node->address(), *prompt_hashes_, clock_->Now());
  provenance_.prefill.push_back(PrefillHop{node->address(), LayoutNameOf(response->kv().layout())});
  kv_ = HeldKv{std::move(*response->mutable_kv()), NodeRef{node->address(), node->channel()}};
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

void Driver::ReleaseKv() {
  v1::ReleaseKvRequest request;
  request.set_request_id(kv_->handle.request_id());
  request.set_epoch(kv_->handle.epoch());
  request.set_generation(kv_->handle.generation());
  // Not bounded by the client: a cancelled client is exactly when the blocks must be freed.
  const absl::Status released = nodes_->ReleaseKv(
      kv_->node, std::move(request), clock_->Now() + deps_.options.rpc_timeout, request_id_);
  if (!released.ok()) {
    deps_.log(absl::StrCat("request ", request_id_, ": ReleaseKv on prefill node ",
                           kv_->node.address,
                           " failed (its lease will expire): ", released.ToString()));
  }
  kv_.reset();
}

void Driver::LogEnd(const RequestState* state, const absl::Status& status) {
  const absl::Duration total = clock_->Now() - start_;
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
    if (cancel_.cancelled()) {
      state.Fail(absl::CancelledError("request cancelled by the client"));
      break;
    }
    if (state.kv_to_release() && state.phase() == RequestPhase::kPrefill) {
      ReleaseKv();
      state.OnKvReleased();
    }
    const int failures = state.retries();
    // A resume prefills the prompt and the tokens streamed so far: unpipelined, as its sampled
    // token is ignored (request_state.h). Logprobs stay pipelined: the prefill's final progress
    // message carries the first token's.
    switch (state.NextCall(deps_.options.colocated, deps_.options.pipelined_transfer)) {
      case NodeCall::kColocated:
        Colocated(state);
        break;
      case NodeCall::kPrefill:
        Prefill(state, /*pipelined=*/false);
        break;
      case NodeCall::kPipelined:
        Prefill(state, /*pipelined=*/true);
        break;
      case NodeCall::kDecode:
        Decode(state);
        break;
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

grpc::Status Driver::Run(const GenerateInput& request, const absl::Status& refused) {
  if (deps_.metrics != nullptr) deps_.metrics->requests_running->Add(1);
  absl::Cleanup not_running = [this] {
    if (deps_.metrics != nullptr) deps_.metrics->requests_running->Add(-1);
  };
  request_id_ = request.request_id;
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
  absl::StatusOr<PreparedRequest> prepared = refused.ok()
                                                 ? PrepareRequest(*deps_.model, request)
                                                 : absl::StatusOr<PreparedRequest>(refused);
  provenance_.strict = deps_.options.strict || request.strict;
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

  GenerateDone done;
  done.finish_reason = std::string(FinishReasonName(state.finish_reason()));
  done.prompt_tokens = static_cast<int32_t>(prepared_.prompt.size());
  done.completion_tokens = static_cast<int32_t>(state.streamed().size());
  done.cached_tokens = prompt_cached_tokens_.value_or(0);
  done.request_id = request_id_;
  done.text_tail = detokenizer_->Flush();
  done.retries = state.retries();
  if (first_token_at_ != absl::InfinitePast()) {
    done.ttft_us = absl::ToInt64Microseconds(first_token_at_ - start_);
  }
  done.total_us = absl::ToInt64Microseconds(clock_->Now() - start_);
  sink_->OnDone(std::move(done));
  sink_->OnProvenance(provenance_);
  LogEnd(&state, absl::OkStatus());
  return grpc::Status::OK;
}

}  // namespace generate_internal

namespace {

grpc::Status Generate(const RouterDeps& deps, const GenerateInput& request,
                      const absl::Status& refused, absl::Time client_deadline,
                      const CancellationToken& cancel, GenerateSink* sink) {
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
    generate_internal::Driver driver(deps, client_deadline, cancel, sink);
    return driver.Run(request, refused);
  }
  generate_internal::Driver driver(deps, client_deadline, cancel, sink);
  return driver.Run(request, refused);
}

}  // namespace

grpc::Status RunGenerate(const RouterDeps& deps, const v1::GenerateRequest& request,
                         absl::Time client_deadline, const CancellationToken& cancel,
                         GenerateSink* sink) {
  // A field this router does not know is refused, never ignored (unknown_proto_fields.h).
  return Generate(deps, GenerateInputFromProto(request), RefuseUnknownFields(request),
                  client_deadline, cancel, sink);
}

grpc::Status RunGenerate(const RouterDeps& deps, const GenerateInput& request,
                         absl::Time client_deadline, const CancellationToken& cancel,
                         GenerateSink* sink) {
  return Generate(deps, request, absl::OkStatus(), client_deadline, cancel, sink);
}

}  // namespace tandem
