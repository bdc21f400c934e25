// The event loop of serving/http_server.h: one thread on a libevent event_base that owns the
// listening socket and every connection, and does all of their socket I/O (TLS through
// bufferevent_openssl). Internal to the HTTP server.
//
// Per connection it reads one request at a time (serving/http_wire.h), hands it to `on_request`
// (on the loop; the server answers it there or on a handler thread), then writes the exchange's
// bytes as they are posted (HttpOutbox::Post from any thread: a mutex-protected list and one
// eventfd, so one wake-up takes every exchange posted since the last). Reading stays enabled
// while a request is answered, so a client that closes the connection is seen at once (EOF) and
// the exchange's on_gone runs on the loop. After each response the next request on the
// connection is read (keep-alive, at most kMaxRequestsPerConnection); a connection waiting for a
// request closes after kIdleTimeout, one whose client reads nothing for kIdleTimeout too. When
// accept() fails (out of file descriptors) accepting pauses for 100 ms rather than spinning.
//
// Thread-safety: Post from any thread; Start, StopAccepting and Shutdown from one thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "serving/http_exchange_state.h"
#include "serving/http_tls.h"

struct event_base;
struct event;
struct evconnlistener;
struct sockaddr;

namespace tandem {

class HttpLoop final : public HttpOutbox {
 public:
  static constexpr int kMaxRequestsPerConnection = 5;
  static constexpr absl::Duration kIdleTimeout = absl::Seconds(5);

  struct Options {
    size_t max_body_bytes = 0;
    SslCtxPtr tls;  // null: plain HTTP
    // Loop thread, once per request read (state->request filled; state->keep_alive set). The
    // callee sets state->route and answers (HttpExchange calls, then State::HandlerDone) on any
    // thread. `too_large`: only the head was read; the body exceeds max_body_bytes.
    std::function<void(std::shared_ptr<HttpExchange::State> state, bool too_large)> on_request;
    // Loop thread, once per request handed to on_request, after its response was written (or
    // the connection closed): state->route and the status sent (500 when the handler sent none).
    std::function<void(const std::string& route, int status)> on_response;
  };

  // Listens on `host`:`port` (port 0: any free port; backlog 4096) and starts the loop thread.
  // UNAVAILABLE when the address cannot be bound; INTERNAL when libevent cannot start.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<HttpLoop>> Start(const std::string& host,
                                                                       int port, Options options);
  // Shuts down if Shutdown was not called.
  ~HttpLoop() override;
  HttpLoop(const HttpLoop&) = delete;
  HttpLoop& operator=(const HttpLoop&) = delete;

  int port() const { return port_; }
  void Post(std::shared_ptr<HttpExchange::State> state) override;
  // Closes the listening socket; a request read from now on closes its connection unanswered.
  void StopAccepting();
  // Writes what was posted, closes every connection (waiting at most ~2 s for output to drain)
  // and ends the thread. Idempotent.
  void Shutdown();

  struct Conn;  // one connection (http_loop.cc)

 private:
  explicit HttpLoop(Options options);

  // Runs `fn` on the loop thread and waits (bounded) for it to have run.
  void RunOnLoop(std::function<void()> fn);
  void Wake();
  static void OnWake(int fd, short what, void* arg);
  static void OnAccept(evconnlistener* listener, int fd, ::sockaddr* addr, int len, void* arg);
  // accept() failed (e.g. EMFILE): accepting pauses for a moment instead of spinning.
  static void OnAcceptError(evconnlistener* listener, void* arg);
  void Drain();
  void Apply(const std::shared_ptr<HttpExchange::State>& state);
  void CloseAll();

  friend struct Conn;
  Options options_;
  event_base* base_ = nullptr;
  evconnlistener* listener_ = nullptr;
  event* wake_event_ = nullptr;
  int wake_fd_ = -1;
  int port_ = 0;
  std::thread thread_;

  absl::Mutex mu_;
  std::vector<std::shared_ptr<HttpExchange::State>> posted_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void()>> commands_ ABSL_GUARDED_BY(mu_);
  bool woken_ ABSL_GUARDED_BY(mu_) = false;  // the eventfd was written and not yet read

  // Loop thread only.
  std::vector<Conn*> conns_;
  bool stopping_ = false;  // StopAccepting was called
  bool closing_ = false;   // Shutdown: close each connection once its output drained
  event* close_deadline_ = nullptr;
  event* accept_resume_ = nullptr;  // re-enables the listener after OnAcceptError
};

}  // namespace tandem
