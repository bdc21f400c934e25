// Backend that bypasses the router: the two calls the router makes for a request, made by the
// client itself — PrefillService/Prefill on a prefill node (the first token arrives with its
// response), then DecodeService/Decode on a decode node, whose token events are the rest of the
// stream. Greedy sampling; with ignore_eos no stop ids are sent. Token-id prompts only (there is
// no tokenizer here). A one-token request releases its KV with ReleaseKv instead of decoding.
// Comparing it with GrpcBackend on the same nodes measures what the router adds per request and
// per streamed token (docs/PERFORMANCE.md, "End to end"). Failures are classed by gRPC code name
// with a "prefill:" or "decode:" prefix.
//
// Thread-safety: Send may be called concurrently.
#pragma once

#include <grpcpp/security/credentials.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "bench/serve/backend.h"
#include "tandem/v1/decode.grpc.pb.h"
#include "tandem/v1/prefill.grpc.pb.h"

namespace tandem::bench {

class DirectBackend : public Backend {
 public:
  // `credentials`: of both channels (TLS with a client certificate for mutual-TLS nodes);
  // nullptr = insecure.
  DirectBackend(const std::string& prefill_address, const std::string& decode_address,
                std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr);
  // kInvalidArgument for prompts that are not token ids.
  static absl::Status Check(const BenchRequest& request);
  RequestRecord Send(const BenchRequest& request, absl::Duration timeout) override;

 private:
  std::unique_ptr<v1::PrefillService::Stub> prefill_;
  std::unique_ptr<v1::DecodeService::Stub> decode_;
};

}  // namespace tandem::bench
