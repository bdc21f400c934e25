// One DecodeService.Decode call read through gRPC's callback API, so the request thread can
// wait for the next event with a bound (the decode idle timeout) and a client's cancellation
// can stop it (CallCanceller on context()).
//
// Events are queued as they arrive; Read() returns them in order, then the stream's end with
// its status. The reactor frees itself when gRPC is done with the call; the context, request
// and queue live in a block shared with it, so destroying a DecodeStream early (after
// cancelling it, which the destructor does) is safe.
//
// Thread-safety: Read from one thread; context() may be cancelled from any thread.
#pragma once

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/support/status.h>

#include <deque>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "tandem/v1/decode.grpc.pb.h"

namespace tandem {

class DecodeStream {
 public:
  // Starts the call at once, carrying `request_id` as x-request-id metadata (serving/request_id.h).
  DecodeStream(const std::shared_ptr<grpc::Channel>& channel, v1::DecodeRequest request,
               absl::Time deadline, const std::string& request_id = "");
  ~DecodeStream();
  DecodeStream(const DecodeStream&) = delete;
  DecodeStream& operator=(const DecodeStream&) = delete;

  grpc::ClientContext* context();

  struct ReadResult {
    enum class Kind {
      kEvent,  // `event` holds the next DecodeEvent
      kEnd,    // the stream is over; `status` is its final status
      kIdle,   // nothing arrived within the wait
    };
    Kind kind = Kind::kIdle;
    v1::DecodeEvent event;
    grpc::Status status;
  };
  // Waits at most `idle` for the next event or the end of the stream.
  ReadResult Read(absl::Duration idle);

 private:
  struct Shared {
    grpc::ClientContext context;
    v1::DecodeRequest request;
    absl::Mutex mu;
    std::deque<v1::DecodeEvent> events ABSL_GUARDED_BY(mu);
    bool done ABSL_GUARDED_BY(mu) = false;
    grpc::Status status ABSL_GUARDED_BY(mu);
  };
  class Reactor;

  std::shared_ptr<Shared> shared_;
};

}  // namespace tandem
