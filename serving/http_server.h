// A small HTTP/1.1 server for the router's OpenAI API and the processes' /metrics: exact-path
// routes, whole responses and chunked streams (server-sent events).
//
// One event-loop thread (libevent, serving/http_loop.h) accepts every connection (listen backlog
// 4096), reads its requests (http-parser, serving/http_wire.h) and does all of its socket I/O;
// no thread is parked per connection. A request's handler runs on a thread of an on-demand pool
// of at most `threads` (serving/on_demand_pool.h: threads are started only when every started one
// is busy, each with a normal 8 MiB stack) and may block; requests beyond `threads` wait for a
// thread, their connections open. Respond, StartStream, WriteChunk and EndStream, from any
// thread, format their bytes and hand them to the loop (one wake-up of the loop carries whatever
// every exchange wrote meanwhile), which writes them. While a request is answered the loop keeps
// reading its connection, so a client that closes it is seen at once, from the loop, with no
// polling (HttpExchange::OnClientGone).
//
// HTTP/1.1 carries one request at a time per connection (pipelined requests wait for the
// response before theirs); a connection serves at most 5 requests (keep-alive) and is closed
// after 5 s idle, or when its client reads nothing of a response for 5 s. Request bodies over
// HttpServerOptions::max_body_bytes are refused with 413 before they are read (by
// Content-Length, or as soon as a chunked body passes the limit), and the connection is closed.
// "Expect: 100-continue" is answered. With a certificate and key the server speaks HTTPS only
// (TLS 1.2 or later; no client certificate is requested: docs/security.md).
//
// Why not libevent's own evhttp: in libevent 2.1 (Debian 12) it offers no hook before it reads a
// request body (evhttp_set_newreqcb and evhttp_set_errorcb came in 2.2), so a body over the limit
// gets its fixed HTML 413 after it dropped the request's path (the router needs its OpenAI error
// body and the route label of tandem_http_requests_total), and it stops reading a connection while
// its request is handled, so a client closing it would go unseen until a write failed.
//
// Thread-safety: handlers run concurrently; Stop from one thread. An HttpExchange belongs to the
// handler call it is given to.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tandem {

class HttpLoop;
class OnDemandPool;

class HttpExchange {
 public:
  struct State;  // shared by the handler's thread and the event loop (http_exchange_state.h)
  explicit HttpExchange(std::shared_ptr<State> state) : state_(std::move(state)) {}
  HttpExchange(const HttpExchange&) = delete;
  HttpExchange& operator=(const HttpExchange&) = delete;

  std::string method() const;
  std::string path() const;
  // Value of request header `name` (case-insensitive), nullopt when absent.
  std::optional<std::string> header(const char* name) const;
  // The request body; RESOURCE_EXHAUSTED when longer than `max_bytes` (the server itself
  // answers 413 to a body over HttpServerOptions::max_body_bytes).
  absl::StatusOr<std::string> ReadBody(size_t max_bytes);

  using Headers = std::vector<std::pair<std::string, std::string>>;
  // One whole response with Content-Length. False when the client is gone.
  bool Respond(int status, absl::string_view content_type, absl::string_view body,
               const Headers& headers = {});
  // A chunked response: StartStream once, then WriteChunk per piece, then EndStream. Each
  // returns false when the client is gone (the connection is closed by then).
  bool StartStream(int status, absl::string_view content_type, const Headers& headers = {});
  bool WriteChunk(absl::string_view data);
  bool EndStream();
  bool responded() const;

  // `fn` runs (once, on the event loop's thread, while the exchange's lock is held: keep it short
  // and non-blocking) when the client is gone: the connection closed or reset by the peer (seen
  // as it happens, also while the handler works and writes nothing), a failed write, or a client
  // that read nothing for 5 s. Runs at once if the client is already gone.
  // OnClientGone(nullptr) unregisters; do so before what `fn` uses is destroyed.
  void OnClientGone(std::function<void()> fn);

 private:
  std::shared_ptr<State> state_;
};

using HttpHandler = std::function<void(HttpExchange&)>;

struct HttpRoute {
  std::string method;  // "GET", "POST"; another method on the path gets 405
  std::string path;    // exact path ("/v1/models"); query strings are ignored
  HttpHandler handler;
};

struct HttpServerOptions {
  int threads = 1024;                 // bounds the handlers running at once (not connections)
  size_t max_body_bytes = 64u << 20;  // larger request bodies get 413
  // The 413 response's body and content type, given the limit (default: plain text naming it).
  std::function<std::string(size_t max_body_bytes)> body_too_large;
  std::string body_too_large_content_type = "text/plain";
  // The body of the server's own 404 (no route for the path) and 405 (another method on a
  // route's path), given the status and a message naming the method and path; with
  // error_content_type. Empty: a plain-text message.
  std::function<std::string(int status, const std::string& message)> error_body;
  std::string error_content_type = "text/plain";
  // Called once per request read, after its response was written (a stream once it ended) or,
  // when the client went away first, once its handler returned; on the event loop's thread: the
  // route's path, or "" when the path has no route (404), and the HTTP status sent — every
  // status, the server's own (400, 404, 405, 413, 500) included. Keep it short and thread-safe
  // (metrics). Empty: nothing is called.
  std::function<void(const std::string& route, int status)> on_response;
  // HTTPS with these PEM files (both or neither; checked first with serving/tls_credentials.h).
  std::string tls_cert_file;
  std::string tls_key_file;
};

class HttpServer {
 public:
  static constexpr size_t kMaxBodyBytes = 64u << 20;

  // Binds `listen` ("HOST:PORT", port 0 = any free port). INVALID_ARGUMENT for an address
  // without a port or threads < 1; UNAVAILABLE when the address cannot be bound. A path with no
  // route gets 404, a route's path with another method 405; a handler that sends nothing 500
  // (a stream it started and did not end is ended for it).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const std::string& listen, int threads, std::vector<HttpRoute> routes);
  // Also INVALID_ARGUMENT for max_body_bytes == 0 or a certificate and key OpenSSL cannot load.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const std::string& listen, const HttpServerOptions& options, std::vector<HttpRoute> routes);

  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }
  // Stops accepting, waits for every handler to return (make them return first: a handler
  // blocked forever blocks Stop), writes what they sent (for at most ~2 s) and closes every
  // connection. Idempotent; the destructor calls it.
  void Stop();

 private:
  HttpServer();
  void OnRequest(const std::shared_ptr<HttpExchange::State>& state, bool too_large);

  std::vector<HttpRoute> routes_;
  HttpServerOptions options_;
  std::unique_ptr<OnDemandPool> pool_;  // the handlers' threads
  std::unique_ptr<HttpLoop> loop_;
  int port_ = 0;
};

}  // namespace tandem
