#include "bench/serve/grpc_backend.h"

#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/sync_stream.h>

#include "absl/status/status.h"
#include "absl/time/clock.h"

namespace tandem::bench {
namespace {

v1::GenerateRequest ToProto(const BenchRequest& request, const std::string& model,
                            bool ignore_eos) {
  v1::GenerateRequest req;
  req.set_model(model);
  if (!request.prompt_ids.empty()) {
    for (int32_t id : request.prompt_ids) req.mutable_token_ids()->add_ids(id);
  } else if (!request.chat.empty()) {
    for (const ChatTurn& turn : request.chat) {
      v1::ChatMessage* m = req.mutable_chat()->add_messages();
      m->set_role(turn.role);
      m->set_content(turn.content);
    }
  } else {
    req.set_text(request.text);
  }
  req.set_max_tokens(request.max_tokens);
  req.set_ignore_eos(ignore_eos);
  return req;
}

}  // namespace

GrpcBackend::GrpcBackend(std::shared_ptr<grpc::Channel> channel, std::string model, bool ignore_eos)
    : stub_(v1::Router::NewStub(std::move(channel))),
      model_(std::move(model)),
      ignore_eos_(ignore_eos) {}

RequestRecord GrpcBackend::Send(const BenchRequest& request, absl::Duration timeout) {
  RequestRecord rec;
  const v1::GenerateRequest proto = ToProto(request, model_, ignore_eos_);
  grpc::ClientContext ctx;
  const absl::Time start = absl::Now();
  ctx.set_deadline(absl::ToChronoTime(start + timeout));
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader = stub_->Generate(&ctx, proto);
  v1::GenerateResponse response;
  bool got_final = false;
  while (reader->Read(&response)) {
    if (response.has_token()) {
      rec.chunk_times.push_back(absl::Now() - start);
      ++rec.output_tokens;
    } else if (response.has_final()) {
      got_final = true;
      rec.prompt_tokens = response.final().usage().prompt_tokens();
      rec.server_output_tokens = response.final().usage().completion_tokens();
    }
  }
  const grpc::Status status = reader->Finish();
  rec.e2e = absl::Now() - start;
  if (!status.ok()) {
    rec.error = absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code()));
    rec.error_detail = status.error_message();
  } else if (!got_final) {
    rec.error = "INCOMPLETE_STREAM";
    rec.error_detail = "the stream ended without a final message";
  } else {
    rec.ok = true;
  }
  return rec;
}

}  // namespace tandem::bench
