// The server side of one Router.Generate stream (gRPC callback API). The request itself runs on
// its own thread (RunGenerate, which blocks on node calls); this reactor turns its events into
// GenerateResponses, queues them and writes them one at a time, and turns gRPC's OnCancel into a
// cancellation of the request's CancellationToken. Decode tokens come from gRPC's thread
// (decode_call.h relays them as they arrive), so a relayed token is written without waking the
// request's thread.
//
// Lifetime: created by the service, deletes itself in OnDone, which gRPC calls only after
// Finish. Finish is called once, after the request thread closed the stream and every queued
// response was written; the request thread touches the reactor for the last time in Close().
// gRPC may run OnWriteDone/OnDone inline inside StartWrite/Finish, so neither is called with
// the reactor's mutex held, and nothing touches members after Finish.
//
// The request's final provenance (GenerateSink::OnProvenance) goes out as the trailing metadata
// x-tandem-provenance (ProvenanceJson), added just before Finish.
#pragma once

#include <grpcpp/support/server_callback.h>

#include <deque>
#include <string>

#include "absl/synchronization/mutex.h"
#include "common/cancellation.h"
#include "router/generate_driver.h"
#include "serving/call_threads.h"
#include "tandem/v1/router.pb.h"

namespace tandem {

class GenerateReactor final : public grpc::ServerWriteReactor<v1::GenerateResponse>,
                              public GenerateSink {
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
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;
  void OnProvenance(const Provenance& provenance) override;

 private:
  explicit GenerateReactor(grpc::CallbackServerContext* context) : context_(context) {}
  // Queues `response` for writing.
  void Send(v1::GenerateResponse response);
  // Ends the stream with `status` once the queue is drained. The request thread's last call.
  void Close(grpc::Status status);
  // Finish, with the provenance as trailing metadata. Called once, without mu_ held.
  void FinishWithTrailers(const grpc::Status& status, const std::string& provenance);

  grpc::CallbackServerContext* const context_;

  CancellationToken cancel_;  // the request's: cancelled by OnCancel or a failed write
  absl::Mutex mu_;
  std::deque<v1::GenerateResponse> queue_ ABSL_GUARDED_BY(mu_);
  v1::GenerateResponse current_;  // the write in flight (touched only by the writing side)
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;  // a write failed: the client is gone
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;  // Finish was called
  grpc::Status final_status_ ABSL_GUARDED_BY(mu_);
  std::string provenance_ ABSL_GUARDED_BY(mu_);  // ProvenanceJson of the final provenance
};

}  // namespace tandem
