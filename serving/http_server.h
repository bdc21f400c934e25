// A small HTTP/1.1 server on CivetWeb (chosen by bench/http/run.sh, docs/PERFORMANCE.md) for the
// router's OpenAI API and the processes' /metrics: exact-path routes, whole responses and
// chunked streams (server-sent events).
//
// Each connection is served by one of `threads` worker threads for as long as it is open (a
// streaming response holds its thread until it ends), so `threads` bounds the concurrent
// connections; more wait in the accept queue. A handler runs on that worker thread and may
// block.
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

struct mg_connection;
struct mg_context;

namespace tandem {

class HttpExchange {
 public:
  explicit HttpExchange(mg_connection* conn) : conn_(conn) {}
  HttpExchange(const HttpExchange&) = delete;
  HttpExchange& operator=(const HttpExchange&) = delete;

  std::string method() const;
  std::string path() const;
  // Value of request header `name` (case-insensitive), nullopt when absent.
  std::optional<std::string> header(const char* name) const;
  // The request body; RESOURCE_EXHAUSTED when longer than `max_bytes`, UNAVAILABLE when the
  // connection fails while reading.
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
  bool responded() const { return responded_; }

 private:
  bool SendHeaders(int status, absl::string_view content_type, const Headers& headers,
                   std::optional<size_t> content_length);

  mg_connection* const conn_;
  bool responded_ = false;
};

using HttpHandler = std::function<void(HttpExchange&)>;

struct HttpRoute {
  std::string method;  // "GET", "POST"; another method on the path gets 405
  std::string path;    // exact path ("/v1/models"); query strings are ignored
  HttpHandler handler;
};

class HttpServer {
 public:
  // Binds `listen` ("IP:PORT", port 0 = any free port). INVALID_ARGUMENT for an address without
  // a port or threads < 1; UNAVAILABLE when CivetWeb cannot bind or start (its message included).
  // A path with no route gets 404; a handler that sends nothing gets 500.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const std::string& listen, int threads, std::vector<HttpRoute> routes);

  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }
  // Stops accepting and waits for every handler to return (make them return first: a handler
  // blocked forever blocks Stop). Idempotent; the destructor calls it.
  void Stop();

 private:
  HttpServer() = default;
  static int Dispatch(mg_connection* conn, void* route);

  struct PathRoutes;
  std::vector<HttpRoute> routes_;
  std::vector<std::unique_ptr<PathRoutes>> paths_;
  mg_context* ctx_ = nullptr;
  int port_ = 0;
};

}  // namespace tandem
