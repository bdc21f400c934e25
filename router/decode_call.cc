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

DecodeCallResult RunDecodeCall(NodeClient& client, Clock& clock, CallCanceller* canceller,
                               DecodeCallSpec spec, const DecodeCallHooks& hooks) {
  DecodeCallResult result;
  const absl::Duration idle = spec.idle;
  std::unique_ptr<DecodeEventStream> stream =
      client.Decode(spec.node, std::move(spec.request), spec.deadline, spec.request_id);
  CallCanceller::Registration registration(canceller, stream.get());
  const bool bounded_first = spec.first_event_by != absl::InfiniteFuture();
  while (true) {
    absl::Duration wait = idle;
    if (!result.first_event && bounded_first) {
      DecodeCallHooks::Poll poll;
      if (hooks.before_first_event) {
        poll = hooks.before_first_event();
        if (EndWith(poll.step, *stream, idle)) return result;
      }
      const absl::Duration left = spec.first_event_by - clock.Now();
      if (left <= absl::ZeroDuration()) {
        result.failure = absl::DeadlineExceededError(spec.first_event_late);
        return result;
      }
      wait = std::min(poll.wait, left);
    }
    DecodeEventStream::ReadResult next = stream->Read(wait);
    if (next.kind == Kind::kIdle && !result.first_event && bounded_first) continue;
    if (next.kind != Kind::kMessage) {
      result.failure = StreamEndFailure(next, idle);
      return result;
    }
    absl::StatusOr<CallStep> step;
    if (!result.first_event) {
      result.first_event = true;
      result.first_event_at = clock.Now();
      step =
          hooks.on_first_event ? hooks.on_first_event(next.message) : hooks.on_event(next.message);
    } else {
      step = hooks.on_event(next.message);
    }
    if (!step.ok()) {
      result.failure = step.status();
      return result;
    }
    if (EndWith(*step, *stream, idle)) return result;
  }
}

}  // namespace tandem
