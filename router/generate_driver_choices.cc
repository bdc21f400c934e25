// n > 1 from one prefill (docs/router.md#n-choices-from-one-prefill): Driver::RunChoices and the
// joint prefill and decode of a request's choices (generate_driver_internal.h).
//
// Each choice is a RequestState of its own; choice i samples with seed + i. The prompt is
// prefilled once (PrefillRequest.n: a first token per choice from the same logits) and its KV
// pulled by one decode node once, where every choice that goes on decodes from it
// (DecodeRequest.choices; the node shares the prompt's blocks). Tokens reach the client as the
// decode node interleaves them, each TokenChunk naming its choice; a ChoiceEnd follows each
// choice's last token. A choice the joint calls do not finish — the decode node failed, or the
// router serves colocated — is then served on its own, in index order, exactly as a one-choice
// request resumes (its prompt + tokens prefilled again, seed + i): every choice's tokens are the
// ones an n = 1 request with that seed would have produced.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/convert/sampling_proto.h"
#include "router/decode_call.h"
#include "router/generate_driver_internal.h"
#include "router/retry_policy.h"
#include "serving/grpc_status.h"

namespace tandem::generate_internal {

void Driver::SendChoiceEnds() {
  for (Choice& c : choices_) {
    if (c.ended || c.state->phase() != RequestPhase::kDone) continue;
    c.ended = true;
    ChoiceEnded end;
    end.choice = c.index;
    end.finish_reason = std::string(FinishReasonName(c.state->finish_reason()));
    end.text_tail = c.detokenizer->Flush();
    end.completion_tokens = static_cast<int32_t>(c.state->streamed().size());
    sink_->OnChoiceEnd(std::move(end));
  }
}

void Driver::PrefillAndDecodeChoices() {
  const int32_t n = static_cast<int32_t>(choices_.size());
  RequestState& lead = *choices_[0].state;
  // The prefill, retried like a one-choice request's; choice 0's state counts the attempts.
  choice_ = &choices_[0];
  prefill_choices_ = true;
  while (lead.phase() == RequestPhase::kPrefill) {
    if (cancel_.cancelled()) {
      lead.Fail(absl::CancelledError("request cancelled by the client"));
      break;
    }
    choice_first_tokens_.clear();
    choice_first_logprobs_.clear();
    const int failures = lead.retries();
    Prefill(lead, /*pipelined=*/false);
    if (lead.retries() > failures && lead.phase() == RequestPhase::kPrefill &&
        !Backoff(lead.retries())) {
      lead.Fail(absl::CancelledError("request cancelled by the client"));
    }
  }
  prefill_choices_ = false;
  absl::Status error;
  if (lead.phase() == RequestPhase::kFailed) {
    error = lead.error();
  } else if (static_cast<int32_t>(choice_first_tokens_.size()) != n) {
    // The prefill node answered with one first token: it predates n > 1.
    error = absl::FailedPreconditionError(absl::StrCat(
        "prefill node ", kv_.has_value() ? kv_->node.address : std::string("?"), " sent ",
        choice_first_tokens_.size(), " first tokens for ", n, " choices (a build without n > 1)"));
  }
  if (!error.ok()) {
    for (Choice& c : choices_) c.state->Fail(error);  // choice 1 at least was still prefilling
    if (lead.kv_to_release() && kv_.has_value()) ReleaseKv();
    lead.OnKvReleased();
    return;
  }
  const bool logprobs = static_cast<int32_t>(choice_first_logprobs_.size()) == n;
  for (int32_t i = 1; i < n; ++i) {
    choice_ = &choices_[i];
    if (const std::optional<int32_t> token =
            choices_[i].state->OnPrefillOk(choice_first_tokens_[i])) {
      SendToken(*token, 0, logprobs ? &choice_first_logprobs_[i] : nullptr);
    }
  }
  SendChoiceEnds();
  std::vector<Choice*> live;
  for (Choice& c : choices_) {
    if (c.state->phase() == RequestPhase::kDecode) live.push_back(&c);
  }
  if (!live.empty()) DecodeChoices(live);
  // The KV no decode node took (every choice ended at its first token, or the call failed before
  // its first event): released once, for every choice.
  const bool held = std::any_of(choices_.begin(), choices_.end(),
                                [](const Choice& c) { return c.state->kv_to_release(); });
  if (held && kv_.has_value()) ReleaseKv();
  for (Choice& c : choices_) c.state->OnKvReleased();
}

void Driver::DecodeChoices(const std::vector<Choice*>& live) {
  absl::StatusOr<NodeLease> node = PickNode(v1::INSTANCE_ROLE_DECODE, failed_decode_);
  if (!node.ok()) {
    for (Choice* c : live) c->state->Fail(node.status());
    return;
  }
  // One token streamed by each: the same budget and draw number for all.
  const DecodePlan plan = live[0]->state->NextDecode();
  v1::DecodeRequest request = DecodeRequestFor(plan);  // the node adds each index to the seed
  if (NeedsContext(prepared_.sampling)) {
    request.mutable_context_ids()->Add(prepared_.prompt.begin(), prepared_.prompt.end());
  }
  for (Choice* c : live) {
    v1::DecodeChoice* choice = request.add_choices();
    choice->set_index(c->index);
    choice->set_first_token(c->state->streamed().back());
  }

  auto decoding = [&live] {
    return std::any_of(live.begin(), live.end(),
                       [](Choice* c) { return c->state->phase() == RequestPhase::kDecode; });
  };
  bool took_kv = false;
  bool timed_transfer = false;
  DecodeCallHooks hooks;
  hooks.on_event = [&](const v1::DecodeEvent& event) -> absl::StatusOr<CallStep> {
    if (!took_kv) {  // the node has pulled the KV and released the prefill's lease
      took_kv = true;
      for (Choice* c : live) c->state->OnKvReleased();
    }
    if (event.has_finish() && !timed_transfer) {  // every choice's finish repeats it
      timed_transfer = true;
      transfer_time_ += absl::Microseconds(event.finish().transfer_us());
    }
    const auto it = std::find_if(live.begin(), live.end(),
                                 [&](Choice* c) { return c->index == event.choice(); });
    if (it == live.end()) {
      return absl::InternalError(absl::StrCat("decode node sent an event for choice ",
                                              event.choice(), ", which it was not sent"));
    }
    choice_ = *it;
    OnDecodeEvent(*choice_->state, event);
    SendChoiceEnds();
    // Every choice done: collect the final status so the node sees a clean end.
    return decoding() ? CallStep::kRead : CallStep::kFinish;
  };
  const absl::Time called = clock_->Now();
  const DecodeCallResult call =
      RunDecode(DecodeCallTo(*node, std::move(request), plan.max_new_tokens), std::move(hooks));
  decode_time_ += clock_->Now() - called;
  if (call.failure.ok()) return;
  absl::Status failure = call.failure;
  if (cancel_.cancelled()) {
    for (Choice* c : live) c->state->Fail(absl::CancelledError("request cancelled by the client"));
    return;
  }
  failure = NodeSideCancelAsUnavailable(failure);
  const bool retryable = IsRetryableDecodeError(failure.code());
  const Recovery recovery = took_kv ? Recovery::kResume : Recovery::kReprefill;
  const auto [error, blamed, blamed_node] = BlameDecodeFailure(node->address(), failure, retryable);
  // Every choice still decoding resumes on its own (Serve), or the request fails.
  bool resumed = false;
  for (Choice* c : live) {
    if (c->state->phase() != RequestPhase::kDecode) continue;
    if (retryable && StrictStops(*c->state, recovery, error)) continue;
    c->state->OnDecodeFailed(error);
    if (retryable) NoteRecovery(*c->state, blamed, blamed_node, error, recovery);
    resumed = resumed || (retryable && c->state->phase() == RequestPhase::kPrefill);
  }
  SendChoiceEnds();
  if (resumed) {
    ++resumes_;
    if (deps_.metrics != nullptr) deps_.metrics->decode_resumes->Increment();
  }
}

grpc::Status Driver::RunChoices() {
  const int32_t n = prepared_.n;
  const uint64_t seed = prepared_.sampling.seed;
  choices_.resize(n);
  for (int32_t i = 0; i < n; ++i) {
    choices_[i].index = i;
    choices_[i].state.emplace(prepared_.prompt, prepared_.max_tokens, prepared_.stop_ids,
                              deps_.options.max_attempts);
    choices_[i].detokenizer.emplace(deps_.model->tokenizer(), /*skip_special=*/true);
  }
  // Colocated serving has no prefill to share: each choice is served on its own below.
  if (!deps_.options.colocated) PrefillAndDecodeChoices();
  const RequestState* failed = nullptr;
  for (Choice& c : choices_) {
    RequestState& state = *c.state;
    if (state.phase() == RequestPhase::kPrefill || state.phase() == RequestPhase::kDecode) {
      choice_ = &c;
      prepared_.sampling.seed = seed + static_cast<uint64_t>(c.index);
      Serve(state);
      prepared_.sampling.seed = seed;
      if (state.kv_to_release()) {
        ReleaseKv();
        state.OnKvReleased();
      }
      SendChoiceEnds();
    }
    if (state.phase() == RequestPhase::kFailed) {
      failed = &state;
      break;
    }
  }
  choice_ = nullptr;
  provenance_.final = true;
  if (failed != nullptr) {
    LogEnd(failed, failed->error());
    sink_->OnProvenance(provenance_);
    return ToGrpcStatus(failed->error());
  }

  int32_t completion_tokens = 0;
  int retries = 0;
  for (const Choice& c : choices_) {
    completion_tokens += static_cast<int32_t>(c.state->streamed().size());
    retries += c.state->retries();
  }
  GenerateDone done;
  // Each choice's finish reason and text tail came with its ChoiceEnded; choice 0's reason here.
  done.finish_reason = std::string(FinishReasonName(choices_[0].state->finish_reason()));
  done.prompt_tokens = static_cast<int32_t>(prepared_.prompt.size());
  done.completion_tokens = completion_tokens;
  done.cached_tokens = prompt_cached_tokens_.value_or(0);
  done.request_id = request_id_;
  done.retries = retries;
  if (first_token_at_ != absl::InfinitePast()) {
    done.ttft_us = absl::ToInt64Microseconds(first_token_at_ - start_);
  }
  done.total_us = absl::ToInt64Microseconds(clock_->Now() - start_);
  sink_->OnDone(std::move(done));
  sink_->OnProvenance(provenance_);
  LogEnd(choices_[0].state.operator->(), absl::OkStatus());
  return grpc::Status::OK;
}

}  // namespace tandem::generate_internal
