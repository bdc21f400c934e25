// The server side of one Router.Generate stream (gRPC callback API). The request itself runs on
// its own thread (RunGenerate, which blocks on node calls); this reactor turns its events into
// GenerateResponses and writes them through serving's QueuedWriteReactor (one at a time, in
// order; gRPC's OnCancel and a failed write cancel the request's CancellationToken). Decode
// tokens come from gRPC's thread (decode_call.h relays them as they arrive), so a relayed token is
// written without waking the request's thread — which is why the queue is unbounded here: that
// thread must not block (a request's responses are bounded by its max_tokens).
//
// Lifetime: as QueuedWriteReactor's: created by the service, deletes itself in OnDone, after
// Finish; the request thread touches the reactor for the last time in Close().
//
// The request's final provenance (GenerateSink::OnProvenance) goes out as the trailing metadata
// x-tandem-provenance (ProvenanceJson), added just before Finish.
#pragma once

#include <grpcpp/support/server_callback.h>

#include <string>

#include "absl/synchronization/mutex.h"
#include "router/generate_driver.h"
#include "serving/call_threads.h"
#include "serving/queued_write_reactor.h"
#include "tandem/v1/router.pb.h"

namespace tandem {

class GenerateReactor final : public QueuedWriteReactor<v1::GenerateResponse>, public GenerateSink {
 public:
  // Starts the request on a new thread of `threads` (RESOURCE_EXHAUSTED when their bound is
  // reached). `deps` must outlive the request.
  static GenerateReactor* Start(grpc::CallbackServerContext* context,
                                const v1::GenerateRequest* request, const RouterDeps* deps,
                                CallThreads* threads);

  // The request's events (generate_events.h), each written as one GenerateResponse.
  void OnToken(GeneratedToken token) override;
  void OnChoiceEnd(ChoiceEnded end) override;
  void OnDone(GenerateDone done) override;
  void OnProvenance(const Provenance& provenance) override;
  using QueuedWriteReactor::OnDone;  // gRPC's, beside the sink's

 private:
  explicit GenerateReactor(grpc::CallbackServerContext* context)
      : QueuedWriteReactor(kUnboundedQueue), context_(context) {}
  // The provenance as trailing metadata.
  void BeforeFinish() override;

  grpc::CallbackServerContext* const context_;
  absl::Mutex mu_;
  std::string provenance_ ABSL_GUARDED_BY(mu_);  // ProvenanceJson of the final provenance
};

}  // namespace tandem
