// RunGrpcStreams (capacity_clients.h): callback reactors, so thousands of streams need no
// thread each.
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/router/capacity_clients.h"
#include "bench/router/stream_runner.h"
#include "tandem/v1/router.grpc.pb.h"

namespace tandem::bench {
namespace {

// Channels the streams are spread over: one HTTP/2 connection would cap them at its
// max_concurrent_streams.
constexpr int kChannels = 8;

class Stream final : public grpc::ClientReadReactor<v1::GenerateResponse> {
 public:
  Stream(v1::Router::Stub* stub, v1::GenerateRequest request, absl::Time deadline,
         StreamResult* result, Countdown* done)
      : request_(std::move(request)), result_(result), done_(done) {
    ctx_.set_deadline(absl::ToChronoTime(deadline));
    stub->async()->Generate(&ctx_, &request_, this);
    StartRead(&response_);
    StartCall();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows with the status
    if (response_.has_token()) result_->token_times.push_back(absl::Now());
    StartRead(&response_);
  }

  void OnDone(const grpc::Status& status) override {
    result_->ok = status.ok();
    if (!status.ok()) result_->error = status.error_message();
    done_->Done();
    delete this;
  }

 private:
  grpc::ClientContext ctx_;
  const v1::GenerateRequest request_;
  v1::GenerateResponse response_;
  StreamResult* const result_;
  Countdown* const done_;
};

}  // namespace

std::vector<StreamResult> RunGrpcStreams(const LoadSpec& spec) {
  std::vector<std::unique_ptr<v1::Router::Stub>> stubs;
  for (int i = 0; i < kChannels; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("tandem.bench_channel", i);  // distinct arguments: a connection each
    stubs.push_back(v1::Router::NewStub(
        grpc::CreateCustomChannel(spec.target, grpc::InsecureChannelCredentials(), args)));
  }
  return RunCallbackStreams(
      spec, "gRPC", [&](int i, StreamResult* result, Countdown* done, absl::Time deadline) {
        v1::GenerateRequest request;
        request.set_text("hello");
        request.set_max_tokens(spec.tokens);
        request.set_request_id(result->client_id);
        new Stream(stubs[i % kChannels].get(), std::move(request), deadline, result, done);
      });
}

}  // namespace tandem::bench
