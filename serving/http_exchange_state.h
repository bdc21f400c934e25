// What an HttpExchange (serving/http_server.h) shares between the thread that answers a request
// and the server's event loop (serving/http_loop.h). Internal to the HTTP server.
//
// The answering thread formats its response bytes into `pending` (the head and each chunk, with
// chunked framing) and hands the state to the loop's outbox when it was not queued there yet, so
// one wake-up of the loop carries whatever was written meanwhile; the loop takes `pending` and
// writes it to the connection. The loop sets `gone` when the connection closes and runs
// `on_gone` then.
//
// Thread-safety: the request fields are set before the state is shared and never change; the
// fields under `mu` are shared; `conn` and `reported` belong to the loop thread.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "serving/http_server.h"
#include "serving/http_wire.h"

namespace tandem {

// Where answering threads hand their exchanges: the event loop.
class HttpOutbox {
 public:
  virtual ~HttpOutbox() = default;
  // Any thread. The loop then takes the state's pending bytes and flags.
  virtual void Post(std::shared_ptr<HttpExchange::State> state) = 0;
};

struct HttpExchange::State {
  // The request, fixed before the state is shared.
  HttpRequestHead request;
  bool keep_alive = false;  // the response says Connection: keep-alive
  std::string route;        // reported to on_response: the routed path, "" when none
  HttpOutbox* outbox = nullptr;

  absl::Mutex mu;
  enum class Phase { kPending, kWhole, kStream } phase ABSL_GUARDED_BY(mu) = Phase::kPending;
  int status ABSL_GUARDED_BY(mu) = 0;
  std::string pending ABSL_GUARDED_BY(mu);        // response bytes the loop has not taken
  bool queued ABSL_GUARDED_BY(mu) = false;        // in the outbox, not yet taken
  bool ended ABSL_GUARDED_BY(mu) = false;         // EndStream called
  bool gone ABSL_GUARDED_BY(mu) = false;          // the client is gone
  bool handler_done ABSL_GUARDED_BY(mu) = false;  // the handler returned
  std::function<void()> on_gone ABSL_GUARDED_BY(mu);

  // Loop thread only.
  void* conn = nullptr;   // the connection still waiting for this response, or null
  bool reported = false;  // on_response was called (or is owed by the connection)

  // Marks the client gone and runs on_gone (once). Loop thread.
  void MarkGone() ABSL_LOCKS_EXCLUDED(mu);
  // The handler returned: the loop ends the response (500 if none was sent).
  static void HandlerDone(const std::shared_ptr<State>& state) ABSL_LOCKS_EXCLUDED(mu);
  // Hands the state to the outbox unless it is queued there. Call without `mu` held.
  static void Post(const std::shared_ptr<State>& state, bool need_post);
};

}  // namespace tandem
