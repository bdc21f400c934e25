// Backend for Tandem's router: tandem.v1.Router/Generate (server streaming). Token-id prompts go
// as token_ids, chat as a ChatConversation, text as text; greedy sampling, ignore_eos as
// configured. Each TokenChunk is one token; the final message's usage gives the server's counts.
// Failures are classed by gRPC code name ("UNAVAILABLE", ...), or "INCOMPLETE_STREAM" when the
// stream ends OK without a final message.
//
// Thread-safety: Send may be called concurrently (one channel, one stream per call).
#pragma once

#include <memory>
#include <string>

#include "bench/serve/backend.h"
#include "tandem/v1/router.grpc.pb.h"

namespace tandem::bench {

class GrpcBackend : public Backend {
 public:
  // `channel` leads to a router (or anything serving tandem.v1.Router); serving/client_channel.h
  // makes one with TLS and the API key.
  GrpcBackend(std::shared_ptr<grpc::Channel> channel, std::string model, bool ignore_eos);
  RequestRecord Send(const BenchRequest& request, absl::Duration timeout) override;

 private:
  std::unique_ptr<v1::Router::Stub> stub_;
  const std::string model_;
  const bool ignore_eos_;
};

}  // namespace tandem::bench
