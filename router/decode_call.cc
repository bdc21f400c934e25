#include "router/decode_call.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/kv_source_failure.h"

namespace tandem {

absl::Status StreamEndFailure(const DecodeEventStream::ReadResult& next, absl::Duration idle) {
  if (next.kind == DecodeEventStream::ReadResult::Kind::kIdle) {
    return absl::DeadlineExceededError(absl::StrCat(
        "no decode event for ", absl::ToInt64Milliseconds(idle), " ms (decode idle timeout)"));
  }
  if (next.status.ok()) return absl::UnknownError("decode stream ended without a finish event");
  return next.status;
}

absl::Status NodeSideCancelAsUnavailable(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kCancelled) return status;
  return WithPayloadsOf(
      absl::UnavailableError(absl::StrCat("node cancelled the call: ", status.message())), status);
}

namespace {

using Kind = DecodeEventStream::ReadResult::Kind;

// Ends the call as `step` says; returns false for kRead (the call goes on).
bool EndWith(CallStep step, DecodeEventStream& stream, absl::Duration idle) {
  switch (step) {
    case CallStep::kRead:
      return false;
    case CallStep::kFinish:
      stream.Read(idle);
      return true;
    case CallStep::kDrain:
      for (int i = 0; i < 2 && stream.Read(idle).kind == Kind::kMessage; ++i) {
      }
      return true;
    case CallStep::kCancel:
      stream.Cancel();
      return true;
  }
  return true;
}

}  // namespace

DecodeCallResult RunDecodeCall(NodeClient& client, Clock& clock, const CancellationToken& cancel,
                               DecodeCallSpec spec, const DecodeCallHooks& hooks) {
  DecodeCallResult result;
  const absl::Duration idle = spec.idle;
  Arrivals own_arrivals;  // declared before the stream, which notes it until destroyed
  Arrivals& arrivals = hooks.arrivals != nullptr ? *hooks.arrivals : own_arrivals;
  std::unique_ptr<DecodeEventStream> stream =
      client.Decode(spec.node, std::move(spec.request), spec.deadline, spec.request_id);
  // Registered after the stream exists and unregistered before it goes (declared after it).
  const CancelCallback on_cancel = cancel.OnCancel([s = stream.get()] { s->Cancel(); });
  // What an event means: the hooks' step (the first event's own hook first).
  const auto handle = [&](const v1::DecodeEvent& event) -> absl::StatusOr<CallStep> {
    if (result.first_event) return hooks.on_event(event);
    result.first_event = true;
    result.first_event_at = clock.Now();
    return hooks.on_first_event ? hooks.on_first_event(event) : hooks.on_event(event);
  };
  // A pipelined call's wait for its first event: read here, with the hook's streams (the watch)
  // looked at before each wait; an arrival on any of them ends the wait.
  const bool wait_first = spec.first_event_by != absl::InfiniteFuture();
  if (wait_first) stream->NoteArrivalsIn(&arrivals);
  while (!result.first_event && wait_first) {
    // Taken before looking at the streams: whatever arrives after this moves the count, so the
    // wait below returns at once instead of missing it.
    const uint64_t seen = arrivals.count();
    if (hooks.before_first_event) {
      if (EndWith(hooks.before_first_event(), *stream, idle)) return result;
    }
    const absl::Duration left = spec.first_event_by - clock.Now();
    if (left <= absl::ZeroDuration()) {
      result.failure = absl::DeadlineExceededError(spec.first_event_late);
      return result;
    }
    DecodeEventStream::ReadResult next = stream->Read(absl::ZeroDuration());
    if (next.kind == Kind::kIdle) {
      clock.Wait(left, [&](absl::Time real_deadline) { arrivals.AwaitAfter(seen, real_deadline); });
      continue;
    }
    if (next.kind != Kind::kMessage) {
      result.failure = StreamEndFailure(next, idle);
      return result;
    }
    const absl::StatusOr<CallStep> step = handle(next.message);
    if (!step.ok()) {
      result.failure = step.status();
      return result;
    }
    if (EndWith(*step, *stream, idle)) return result;
  }
  if (wait_first) stream->NoteArrivalsIn(nullptr);
  // Every other event is handled as it arrives (Relay: on the transport's thread), until a hook
  // ends the call.
  absl::StatusOr<CallStep> step = CallStep::kRead;
  const DecodeEventStream::ReadResult end = stream->Relay(
      [&](v1::DecodeEvent& event) {
        step = handle(event);
        return step.ok() && *step == CallStep::kRead;
      },
      idle);
  if (end.kind != Kind::kMessage) {
    result.failure = StreamEndFailure(end, idle);
  } else if (!step.ok()) {
    result.failure = step.status();
  } else {
    EndWith(*step, *stream, idle);
  }
  return result;
}

}  // namespace tandem
