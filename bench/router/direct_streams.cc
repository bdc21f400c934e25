// RunDirectStreams (capacity_clients.h): the router's own node calls -- Prefill, then a Decode
// stream from its KV handle -- made by the client itself, with no router between. The added
// latency it measures is what the bench's clients and fake nodes add on their own at the same
// load on the same cores: the floor under the gRPC and HTTP figures.
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
#include "tandem/v1/decode.grpc.pb.h"
#include "tandem/v1/prefill.grpc.pb.h"

namespace tandem::bench {
namespace {

// One stream: the Prefill call (its answer is token 0), then the Decode call's tokens.
class DirectStream final : public grpc::ClientReadReactor<v1::DecodeEvent> {
 public:
  DirectStream(v1::PrefillService::Stub* prefill, v1::DecodeService::Stub* decode,
               const std::string& id, int tokens, absl::Time deadline, StreamResult* result,
               Countdown* done)
      : decode_(decode), tokens_(tokens), deadline_(deadline), result_(result), done_(done) {
    prefill_ctx_.set_deadline(absl::ToChronoTime(deadline));
    prefill_request_.set_request_id(id);
    prefill_request_.add_prompt_ids(1);
    prefill->async()->Prefill(&prefill_ctx_, &prefill_request_, &prefill_response_,
                              [this](grpc::Status status) { Prefilled(std::move(status)); });
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows with the status
    if (event_.has_token()) result_->token_times.push_back(absl::Now());
    StartRead(&event_);
  }

  void OnDone(const grpc::Status& status) override { End(status); }

 private:
  void Prefilled(grpc::Status status) {
    if (!status.ok()) {
      End(status);
      return;
    }
    result_->token_times.push_back(absl::Now());
    decode_ctx_.set_deadline(absl::ToChronoTime(deadline_));
    decode_request_.set_request_id(prefill_request_.request_id());
    *decode_request_.mutable_kv() = prefill_response_.kv();
    decode_request_.set_first_token(prefill_response_.first_token());
    decode_request_.set_max_new_tokens(tokens_);
    decode_->async()->Decode(&decode_ctx_, &decode_request_, this);
    StartRead(&event_);
    StartCall();
  }

  void End(const grpc::Status& status) {
    result_->ok = status.ok();
    if (!status.ok()) result_->error = status.error_message();
    done_->Done();
    delete this;
  }

  v1::DecodeService::Stub* const decode_;
  const int tokens_;
  const absl::Time deadline_;
  grpc::ClientContext prefill_ctx_;
  v1::PrefillRequest prefill_request_;
  v1::PrefillResponse prefill_response_;
  grpc::ClientContext decode_ctx_;
  v1::DecodeRequest decode_request_;
  v1::DecodeEvent event_;
  StreamResult* const result_;
  Countdown* const done_;
};

}  // namespace

std::vector<StreamResult> RunDirectStreams(const LoadSpec& spec) {
  auto prefill = v1::PrefillService::NewStub(
      grpc::CreateChannel(spec.prefill_target, grpc::InsecureChannelCredentials()));
  // One channel per node, as the router has.
  auto decode = v1::DecodeService::NewStub(
      grpc::CreateChannel(spec.target, grpc::InsecureChannelCredentials()));
  return RunCallbackStreams(spec, "direct",
                            [&](int, StreamResult* result, Countdown* done, absl::Time deadline) {
                              new DirectStream(prefill.get(), decode.get(), result->client_id,
                                               spec.tokens, deadline, result, done);
                            });
}

}  // namespace tandem::bench
