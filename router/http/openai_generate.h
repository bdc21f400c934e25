// Serves one POST /v1/chat/completions or /v1/completions: parses the body, tokenises the prompt
// (for the default max_tokens and the usage), runs the request through RunGenerate and writes
// the OpenAI response — one JSON body, or server-sent events as tokens arrive.
//
// A client that disconnects cancels the request's CancellationToken (the router then stops
// the node calls and releases the KV lease): HttpServer's event loop sees the connection close as
// it happens, also while no token comes (e.g. during a long prefill). Stop strings
// are matched on the text stream (StopMatcher); a match cancels the request the same way and ends
// the response with finish_reason "stop". Errors before the first token get the OpenAI error object
// with HttpStatusFor's status; after it, an error event and [DONE] end the stream.
//
// Provenance (router/provenance.h): the x-tandem-provenance header carries ProvenanceJson as
// known when the headers go out — a stream's at its first token ("final": false: the prefill
// side, and the decode node when it sent that token), a whole response's or an error's at the
// end ("final": true). With "tandem": {"provenance": true} the final one also comes in the body
// (openai_tandem.h).
//
// Thread-safety: ServeCompletion runs on many HTTP worker threads at once.
#pragma once

#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "common/cancellation.h"
#include "router/generate_driver.h"
#include "router/http/openai_request.h"
#include "serving/http_server.h"

namespace tandem {

// The requests in flight, so a shutdown can cancel them.
class ActiveRequests {
 public:
  void Add(CancellationToken* c);
  void Remove(CancellationToken* c);
  // Cancels every request in flight and every one added later.
  void CancelAll();
  // Waits until none is in flight or `timeout` passed; true when none is.
  bool WaitEmpty(absl::Duration timeout);

 private:
  absl::Mutex mu_;
  absl::flat_hash_set<CancellationToken*> active_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

// `system_fingerprint` goes into every response body and chunk (SystemFingerprint()).
// Unknown request fields are logged through deps.log (LogUnknownFields).
void ServeCompletion(const RouterDeps& deps, OpenAiEndpoint endpoint, ActiveRequests& active,
                     HttpExchange& exchange, const std::string& system_fingerprint);

// Logs one line per name in `fields` that this process has not logged before (whatever the
// endpoint): "openai_unknown_field field=NAME endpoint=PATH action=ignored (logged once per
// field name)". Thread-safe. Nothing when `log` is empty.
void LogUnknownFields(const LogFn& log, absl::string_view endpoint_path,
                      const std::vector<std::string>& fields);

// The request id the response's x-request-id carries: the client's x-request-id when it is a
// plausible id (1-128 printable ASCII characters without spaces), else a new router id.
std::string HttpRequestId(const RouterDeps& deps, const HttpExchange& exchange);

}  // namespace tandem
