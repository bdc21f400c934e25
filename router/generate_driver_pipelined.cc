// Pipelined transfer (RouterOptions::pipelined_transfer): Driver::PipelinedDecode, the Decode
// call sent while the prefill still runs, with the router's own watch of the prefill's progress
// (generate_driver_internal.h).
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/convert/sampling_proto.h"
#include "router/decode_call.h"
#include "router/generate_driver_internal.h"
#include "router/node_client.h"

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

  DecodeCallSpec spec = DecodeCallTo(*node, std::move(request), plan.max_new_tokens);
  // The wait for the first event includes the prompt's prefill: the decode node's first event
  // waits for the whole prefill and the last pull.
  const absl::Duration idle = spec.idle;
  const absl::Time called = clock_->Now();
  spec.first_event_by = std::min(spec.deadline, called + deps_.options.rpc_timeout + idle);
  spec.first_event_late = absl::StrCat("pipelined decode node sent no first event within ",
                                       absl::ToInt64Milliseconds(deps_.options.rpc_timeout + idle),
                                       " ms (rpc timeout + decode idle timeout)");
  const absl::Time deadline = spec.deadline;
  absl::Time first_event = absl::InfinitePast();
  // The first token comes from the prefill: watched here too, it reaches the client as soon as the
  // prefill samples it, not after the decode node has pulled the last chunk. A watch that fails
  // only loses that head start: the decode node's first event carries the same token. Opened
  // once the Decode call has started.
  // The watch and the decode call note their arrivals here, so the wait for the decode's first
  // event ends as soon as either has something (declared before the watch: it outlives it).
  Arrivals arrivals;
  std::unique_ptr<KvProgressStream> watch;
  bool watch_opened = false;
  std::optional<int32_t> prefill_token;  // the first token, once the watch has it
  bool done_at_watch = false;            // the request ended at the watch's first token

  DecodeCallHooks hooks;
  hooks.arrivals = &arrivals;
  hooks.before_first_event = [&]() -> CallStep {
    if (!watch_opened) {
      watch_opened = true;
      v1::WatchKvRequest w;
      w.set_request_id(kv_->handle.request_id());
      w.set_generation(kv_->handle.generation());
      watch = nodes_->WatchKv(kv_->node, std::move(w), deadline, request_id_);
      watch->NoteArrivalsIn(&arrivals);
    }
    while (watch != nullptr && !prefill_token.has_value()) {
      KvProgressStream::ReadResult w = watch->Read(absl::ZeroDuration());
      if (w.kind == KvProgressStream::ReadResult::Kind::kIdle) break;
      if (w.kind == KvProgressStream::ReadResult::Kind::kEnd) {
        watch.reset();
        break;
      }
      if (!w.message.done()) continue;
      prefill_token = w.message.first_token();
      watch.reset();
      first_event = clock_->Now();
      const int32_t index = static_cast<int32_t>(state.streamed().size());
      if (const std::optional<int32_t> token = state.OnPrefillOk(*prefill_token)) {
        SendToken(*token, index,
                  w.message.has_first_logprobs() ? &w.message.first_logprobs() : nullptr);
      }
      if (state.phase() != RequestPhase::kDecode) {
        // Done at the first token (a stop id, or max_tokens 1): stop the decode call (the decode
        // node then releases the KV); it is released here too, in case it had not taken it yet.
        done_at_watch = true;
        return CallStep::kCancel;
      }
    }
    return CallStep::kRead;
  };
  hooks.on_first_event = [&](const v1::DecodeEvent& event) -> absl::StatusOr<CallStep> {
    if (event.has_finish()) transfer_time_ += absl::Microseconds(event.finish().transfer_us());
    // The decode node's first event: it has pulled the whole prompt and released the lease.
    if (!event.has_token()) return absl::InternalError("pipelined decode node sent no first token");
    kv_.reset();
    watch.reset();
    if (prefill_token.has_value()) {
      state.OnKvReleased();
      if (event.token() != *prefill_token) {
        return absl::InternalError(absl::StrCat("pipelined decode node's first token ",
                                                event.token(), " differs from the prefill's ",
                                                *prefill_token));
      }
      return CallStep::kRead;
    }
    first_event = clock_->Now();
    const int32_t index = static_cast<int32_t>(state.streamed().size());
    if (const std::optional<int32_t> token = state.OnPrefillOk(event.token())) {
      SendToken(*token, index, event.has_logprobs() ? &event.logprobs() : nullptr);
    }
    state.OnKvReleased();
    // Done at the first token (a stop id, or max_tokens 1): collect the finish event and the
    // status so the node sees a clean end.
    return state.phase() == RequestPhase::kDecode ? CallStep::kRead : CallStep::kDrain;
  };
  hooks.on_event = [&](const v1::DecodeEvent& event) -> absl::StatusOr<CallStep> {
    if (event.has_finish()) transfer_time_ += absl::Microseconds(event.finish().transfer_us());
    return DecodeStep(state, event);
  };
  const DecodeCallResult call = RunDecode(std::move(spec), std::move(hooks));
  watch.reset();
  const absl::Time now = clock_->Now();
  if (first_event == absl::InfinitePast()) {
    prefill_time_ += now - called;
  } else {
    prefill_time_ += first_event - called;
    decode_time_ += now - first_event;
  }
  if (done_at_watch) {
    state.OnKvReleased();
    ReleaseKv();
    return;
  }
  if (call.failure.ok()) return;
  // Before the first token (phase kPrefill) a prefill failure; after it a decode failure,
  // resumed, the run loop releasing the KV if the decode node never took it.
  OnDecodeCallFailed(state, node->address(), call.failure, NodeCall::kPipelined);
}

}  // namespace tandem::generate_internal
