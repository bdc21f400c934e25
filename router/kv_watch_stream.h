// One PrefillService.WatchKv call (pipelined transfer, docs/kv_transfer.md) read through gRPC's
// callback API, like DecodeStream: the router watches a pipelined prefill's progress so it can
// stream the first token the moment the prefill samples it, while the decode node is still
// pulling the last chunk. Messages are queued as they arrive; Read() returns them in order, then
// the end with its status. Destroying it cancels the call (safe at any time).
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
#include "tandem/v1/prefill.grpc.pb.h"

namespace tandem {

class KvWatchStream {
 public:
  // Starts the call at once, carrying `request_id` as x-request-id metadata.
  KvWatchStream(const std::shared_ptr<grpc::Channel>& channel, v1::WatchKvRequest request,
                absl::Time deadline, const std::string& request_id = "");
  ~KvWatchStream();
  KvWatchStream(const KvWatchStream&) = delete;
  KvWatchStream& operator=(const KvWatchStream&) = delete;

  grpc::ClientContext* context();

  struct ReadResult {
    enum class Kind {
      kMessage,  // `message` holds the next KvProgress
      kEnd,      // the stream is over; `status` is its final status
      kIdle,     // nothing arrived within the wait
    };
    Kind kind = Kind::kIdle;
    v1::KvProgress message;
    grpc::Status status;
  };
  // Waits at most `wait` (zero: does not wait) for the next message or the end of the stream.
  ReadResult Read(absl::Duration wait);

 private:
  struct Shared {
    grpc::ClientContext context;
    v1::WatchKvRequest request;
    absl::Mutex mu;
    std::deque<v1::KvProgress> messages ABSL_GUARDED_BY(mu);
    bool done ABSL_GUARDED_BY(mu) = false;
    grpc::Status status ABSL_GUARDED_BY(mu);
  };
  class Reactor;

  std::shared_ptr<Shared> shared_;
};

}  // namespace tandem
