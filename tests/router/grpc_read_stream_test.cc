// GrpcReadStream (router/grpc_read_stream.h) against a loopback DecodeService: Read returns the
// messages in order then the end; Relay hands every message over on gRPC's thread (not the
// caller's), stops when its callback says so (the rest stays for Read), reports the end with the
// node's status, and gives up after the idle time without a message; every queued message and
// the end note the reader's Arrivals.
#include "router/grpc_read_stream.h"

#include <grpcpp/alarm.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "router/arrivals.h"
#include "tandem/v1/decode.grpc.pb.h"
#include "tests/router/loopback_node_test.h"

namespace tandem {
namespace {

using Kind = DecodeEventStream::ReadResult::Kind;

// Streams tokens 0 .. max_new_tokens - 1 and ends with the status named by the request's
// sampling seed: 0 OK, else ABORTED. With first_token > 0, starts that many milliseconds after
// the call arrived; with first_token < 0, sends nothing and never ends (until the client
// cancels).
class TokenService final : public v1::DecodeService::CallbackService {
 public:
  grpc::ServerWriteReactor<v1::DecodeEvent>* Decode(grpc::CallbackServerContext*,
                                                    const v1::DecodeRequest* request) override {
    return new Writer(*request);
  }

 private:
  class Writer final : public grpc::ServerWriteReactor<v1::DecodeEvent> {
   public:
    explicit Writer(const v1::DecodeRequest& request)
        : silent_(request.first_token() < 0),
          count_(request.max_new_tokens()),
          status_(request.sampling().seed() == 0
                      ? grpc::Status::OK
                      : grpc::Status(grpc::StatusCode::ABORTED, "node says aborted")) {
      if (silent_) return;
      if (request.first_token() == 0) {
        Next();
        return;
      }
      alarm_.Set(absl::ToChronoTime(absl::Now() + absl::Milliseconds(request.first_token())),
                 [this](bool) { Next(); });
    }
    void OnWriteDone(bool ok) override {
      if (!ok) {
        Finish(grpc::Status(grpc::StatusCode::CANCELLED, "write failed"));
        return;
      }
      Next();
    }
    void OnCancel() override {
      if (silent_) Finish(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
    }
    void OnDone() override { delete this; }

   private:
    void Next() {
      if (sent_ == count_) {
        Finish(status_);
        return;
      }
      event_.set_token(sent_++);
      StartWrite(&event_);
    }
    const bool silent_;
    const int32_t count_;
    const grpc::Status status_;
    int32_t sent_ = 0;
    v1::DecodeEvent event_;
    grpc::Alarm alarm_;
  };
};

class GrpcReadStreamTest : public LoopbackNodeTest<TokenService> {
 protected:
  // `delay_ms` < 0: a silent node.
  std::unique_ptr<DecodeEventStream> Open(int32_t tokens, bool abort = false,
                                          int32_t delay_ms = 0) {
    v1::DecodeRequest request;
    request.set_max_new_tokens(tokens);
    request.mutable_sampling()->set_seed(abort ? 1 : 0);
    request.set_first_token(delay_ms);
    return client_.Decode(node_, std::move(request), absl::Now() + absl::Seconds(20), "test");
  }
};

TEST_F(GrpcReadStreamTest, ReadReturnsTheMessagesThenTheEnd) {
  std::unique_ptr<DecodeEventStream> stream = Open(3);
  for (int32_t i = 0; i < 3; ++i) {
    const DecodeEventStream::ReadResult next = stream->Read(absl::Seconds(10));
    ASSERT_EQ(next.kind, Kind::kMessage);
    EXPECT_EQ(next.message.token(), i);
  }
  const DecodeEventStream::ReadResult end = stream->Read(absl::Seconds(10));
  ASSERT_EQ(end.kind, Kind::kEnd);
  EXPECT_TRUE(end.status.ok()) << end.status;
}

TEST_F(GrpcReadStreamTest, RelayHandsEveryMessageOverOnGrpcsThreadThenTheEnd) {
  // The node starts 300 ms after the call: the relay is waiting by then.
  std::unique_ptr<DecodeEventStream> stream = Open(200, /*abort=*/true, /*delay_ms=*/300);
  std::vector<int32_t> tokens;
  int on_caller = 0;
  const std::thread::id caller = std::this_thread::get_id();
  const DecodeEventStream::ReadResult end = stream->Relay(
      [&](v1::DecodeEvent& event) {
        tokens.push_back(event.token());
        if (std::this_thread::get_id() == caller) ++on_caller;
        return true;
      },
      absl::Seconds(10));
  ASSERT_EQ(end.kind, Kind::kEnd);
  EXPECT_EQ(end.status.code(), absl::StatusCode::kAborted) << end.status;
  ASSERT_EQ(tokens.size(), 200u);
  for (int32_t i = 0; i < 200; ++i) ASSERT_EQ(tokens[i], i);
  EXPECT_EQ(on_caller, 0);
}

TEST_F(GrpcReadStreamTest, RelayStopsWhenTheCallbackSaysSoAndReadHasTheRest) {
  std::unique_ptr<DecodeEventStream> stream = Open(6);
  std::vector<int32_t> relayed;
  const DecodeEventStream::ReadResult stopped = stream->Relay(
      [&](v1::DecodeEvent& event) {
        relayed.push_back(event.token());
        return event.token() < 3;
      },
      absl::Seconds(10));
  ASSERT_EQ(stopped.kind, Kind::kMessage);
  EXPECT_EQ(relayed, (std::vector<int32_t>{0, 1, 2, 3}));
  for (int32_t i = 4; i < 6; ++i) {
    const DecodeEventStream::ReadResult next = stream->Read(absl::Seconds(10));
    ASSERT_EQ(next.kind, Kind::kMessage);
    EXPECT_EQ(next.message.token(), i);
  }
  EXPECT_EQ(stream->Read(absl::Seconds(10)).kind, Kind::kEnd);
}

TEST_F(GrpcReadStreamTest, RelayAfterReadsGoesOnFromTheNextMessage) {
  std::unique_ptr<DecodeEventStream> stream = Open(5);
  ASSERT_EQ(stream->Read(absl::Seconds(10)).message.token(), 0);
  std::vector<int32_t> relayed;
  const DecodeEventStream::ReadResult end = stream->Relay(
      [&](v1::DecodeEvent& event) {
        relayed.push_back(event.token());
        return true;
      },
      absl::Seconds(10));
  ASSERT_EQ(end.kind, Kind::kEnd);
  EXPECT_TRUE(end.status.ok()) << end.status;
  EXPECT_EQ(relayed, (std::vector<int32_t>{1, 2, 3, 4}));
}

TEST_F(GrpcReadStreamTest, RelayGivesUpAfterTheIdleTimeAndCancelEndsTheCall) {
  std::unique_ptr<DecodeEventStream> stream = Open(1, false, /*delay_ms=*/-1);
  const absl::Time began = absl::Now();
  const DecodeEventStream::ReadResult idle = stream->Relay(
      [](v1::DecodeEvent&) {
        ADD_FAILURE() << "a silent node sent a message";
        return true;
      },
      absl::Milliseconds(200));
  EXPECT_EQ(idle.kind, Kind::kIdle);
  EXPECT_GE(absl::Now() - began, absl::Milliseconds(200));
  stream->Cancel();
  const DecodeEventStream::ReadResult end = stream->Read(absl::Seconds(10));
  ASSERT_EQ(end.kind, Kind::kEnd);
  EXPECT_EQ(end.status.code(), absl::StatusCode::kCancelled) << end.status;
}

// A reader waiting on several streams (the pipelined Decode call and its WatchKv) sleeps on one
// Arrivals: each message and the end note it, so the wait ends when the stream has something.
// The wait's deadline is an hour away: an arrival that noted nothing would run into the test's
// timeout.
TEST_F(GrpcReadStreamTest, EveryMessageAndTheEndNoteTheReadersArrivals) {
  Arrivals arrivals;
  // The node starts 300 ms after the call: the counter is registered by then.
  std::unique_ptr<DecodeEventStream> stream = Open(2, /*abort=*/false, /*delay_ms=*/300);
  stream->NoteArrivalsIn(&arrivals);
  const absl::Time far = absl::Now() + absl::Hours(1);
  uint64_t seen = 0;
  int32_t tokens = 0;
  while (true) {
    const DecodeEventStream::ReadResult next = stream->Read(absl::ZeroDuration());
    if (next.kind == Kind::kEnd) {
      EXPECT_TRUE(next.status.ok()) << next.status;
      break;
    }
    if (next.kind == Kind::kMessage) {
      EXPECT_EQ(next.message.token(), tokens++);
      continue;
    }
    ASSERT_TRUE(arrivals.AwaitAfter(seen, far));
    seen = arrivals.count();
  }
  EXPECT_EQ(tokens, 2);
  EXPECT_EQ(arrivals.count(), 3u);  // two messages and the end
  // A stream that stopped noting (or was destroyed) leaves the counter alone.
  std::unique_ptr<DecodeEventStream> other = Open(1);
  other->NoteArrivalsIn(&arrivals);
  other->NoteArrivalsIn(nullptr);
  EXPECT_EQ(other->Read(absl::Seconds(10)).kind, Kind::kMessage);
  EXPECT_EQ(other->Read(absl::Seconds(10)).kind, Kind::kEnd);
  EXPECT_EQ(arrivals.count(), 3u);
}

}  // namespace
}  // namespace tandem
