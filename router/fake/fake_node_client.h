// An in-process NodeClient (router/node_client.h) for the driver's unit tests: each call is
// answered by a test's handler and recorded, streams play a script against a FakeClock. No
// sockets, no threads: the driver's retry, resume, blame, deadlines and n > 1 logic run as in
// production, with time passing only as the driver waits.
//
// A stream's script is a list of steps, each readable `after` the stream opened (clock time):
// a message, or the end with a status. A read that finds the next step later than its wait
// advances the clock by the wait and reports idle; a step past the call's deadline ends the
// stream with DEADLINE_EXCEEDED at the deadline; past the script's last step the stream ends
// cleanly (OK without a finish). Cancel() (the client's, or the driver's own) ends a stream with
// CANCELLED and is recorded. A stream given NoteArrivalsIn sets a clock alarm at each later
// step, so a Wait on its Arrivals passes time only up to the stream's next step. Relay reads as
// NodeStream's default does (on the caller's thread) and counts what it hands over. A Prefill whose
// CancellationToken is already cancelled ends CANCELLED.
//
// Unset handlers answer UNIMPLEMENTED (ReleaseKv: OK).
//
// Thread-safety: calls may come from any thread; the recorded calls are read by the test once
// the driver returned.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "router/fake/fake_clock.h"
#include "router/node_client.h"

namespace tandem {

template <typename Message>
struct StreamStep {
  absl::Duration after;            // since the stream opened
  std::optional<Message> message;  // none: the end, with `status`
  absl::Status status;
};
template <typename Message>
using StreamScript = std::vector<StreamStep<Message>>;

template <typename Request>
struct RecordedCall {
  std::string address;
  Request request;
  absl::Time at;
  absl::Time deadline;
  std::string request_id;
  // Streams: the call was cancelled (by the request's token or the driver) before it ended.
  std::shared_ptr<bool> cancelled = std::make_shared<bool>(false);
  // Streams: the messages handed to a Relay's callback (the rest went out through Read).
  std::shared_ptr<int> relayed = std::make_shared<int>(0);
};

class FakeNodeClient final : public NodeClient {
 public:
  explicit FakeNodeClient(FakeClock* clock) : clock_(clock) {}

  std::function<absl::StatusOr<v1::PrefillResponse>(const std::string& address,
                                                    const v1::PrefillRequest&)>
      on_prefill;
  std::function<absl::Status(const std::string& address, const v1::ReleaseKvRequest&)> on_release;
  std::function<StreamScript<v1::DecodeEvent>(const std::string& address, const v1::DecodeRequest&)>
      on_decode;
  std::function<StreamScript<v1::KvProgress>(const std::string& address, const v1::WatchKvRequest&)>
      on_watch;

  absl::StatusOr<v1::PrefillResponse> Prefill(const NodeRef& node, v1::PrefillRequest request,
                                              absl::Time deadline, const std::string& request_id,
                                              const CancellationToken* cancel) override;
  absl::Status ReleaseKv(const NodeRef& node, v1::ReleaseKvRequest request, absl::Time deadline,
                         const std::string& request_id) override;
  std::unique_ptr<DecodeEventStream> Decode(const NodeRef& node, v1::DecodeRequest request,
                                            absl::Time deadline,
                                            const std::string& request_id) override;
  std::unique_ptr<KvProgressStream> WatchKv(const NodeRef& node, v1::WatchKvRequest request,
                                            absl::Time deadline,
                                            const std::string& request_id) override;

  std::vector<RecordedCall<v1::PrefillRequest>> prefills() const;
  std::vector<RecordedCall<v1::ReleaseKvRequest>> releases() const;
  std::vector<RecordedCall<v1::DecodeRequest>> decodes() const;
  std::vector<RecordedCall<v1::WatchKvRequest>> watches() const;

 private:
  // Records the call in `calls` and plays `handler`'s script for it.
  template <typename Message, typename Request, typename Handler>
  std::unique_ptr<NodeStream<Message>> OpenStream(std::vector<RecordedCall<Request>>& calls,
                                                  const Handler& handler, const char* handler_name,
                                                  const NodeRef& node, Request request,
                                                  absl::Time deadline,
                                                  const std::string& request_id);

  FakeClock* const clock_;
  mutable absl::Mutex mu_;
  std::vector<RecordedCall<v1::PrefillRequest>> prefills_ ABSL_GUARDED_BY(mu_);
  std::vector<RecordedCall<v1::ReleaseKvRequest>> releases_ ABSL_GUARDED_BY(mu_);
  std::vector<RecordedCall<v1::DecodeRequest>> decodes_ ABSL_GUARDED_BY(mu_);
  std::vector<RecordedCall<v1::WatchKvRequest>> watches_ ABSL_GUARDED_BY(mu_);
};

// Script helpers.
StreamStep<v1::DecodeEvent> TokenAt(absl::Duration after, int32_t token);
StreamStep<v1::DecodeEvent> FinishAt(absl::Duration after, v1::FinishReason reason);
template <typename Message>
StreamStep<Message> EndAt(absl::Duration after, absl::Status status) {
  return StreamStep<Message>{after, std::nullopt, std::move(status)};
}

}  // namespace tandem
