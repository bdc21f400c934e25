#include "serving/http_server.h"

#include <algorithm>
#include <csignal>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "serving/http_exchange_state.h"
#include "serving/http_loop.h"
#include "serving/http_tls.h"
#include "serving/on_demand_pool.h"

namespace tandem {

using State = HttpExchange::State;

HttpServer::HttpServer() = default;

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& listen,
                                                              int threads,
                                                              std::vector<HttpRoute> routes) {
  HttpServerOptions options;
  options.threads = threads;
  return Start(listen, options, std::move(routes));
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& listen,
                                                              const HttpServerOptions& options,
                                                              std::vector<HttpRoute> routes) {
  const size_t colon = listen.rfind(':');
  int32_t port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(absl::string_view(listen).substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("HTTP listen address '", listen, "' is not HOST:PORT"));
  }
  if (options.threads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("HTTP threads must be >= 1, got ", options.threads));
  }
  std::string host = listen.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (options.max_body_bytes == 0) {
    return absl::InvalidArgumentError("HTTP max body size must be > 0");
  }
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError("HTTPS needs both a certificate and a key file");
  }
  HttpLoop::Options loop_options;
  if (!options.tls_cert_file.empty()) {
    absl::StatusOr<SslCtxPtr> tls = LoadServerTls(options.tls_cert_file, options.tls_key_file);
    if (!tls.ok()) return tls.status();
    loop_options.tls = *std::move(tls);
  }
  // A client that goes away must not kill the process with SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  std::unique_ptr<HttpServer> server(new HttpServer());
  server->routes_ = std::move(routes);
  server->options_ = options;
  server->pool_ = std::make_unique<OnDemandPool>(static_cast<size_t>(options.threads));
  HttpServer* self = server.get();
  loop_options.max_body_bytes = options.max_body_bytes;
  loop_options.on_request = [self](std::shared_ptr<State> state, bool too_large) {
    self->OnRequest(state, too_large);
  };
  loop_options.on_response = options.on_response;
  absl::StatusOr<std::unique_ptr<HttpLoop>> loop =
      HttpLoop::Start(host, port, std::move(loop_options));
  if (!loop.ok()) return loop.status();
  server->loop_ = *std::move(loop);
  server->port_ = server->loop_->port();
  return server;
}

// Loop thread: the server's own answers (413, 404, 405) are written here; a route's handler is
// handed to the pool.
void HttpServer::OnRequest(const std::shared_ptr<State>& state, bool too_large) {
  const HttpRequestHead& request = state->request;
  const HttpRoute* route = nullptr;
  std::vector<std::string> allowed;
  for (const HttpRoute& r : routes_) {
    if (r.path != request.path) continue;
    allowed.push_back(r.method);
    if (r.method == request.method) route = &r;
  }
  state->route = allowed.empty() ? std::string() : request.path;
  HttpExchange exchange(state);
  if (too_large) {
    const size_t max = options_.max_body_bytes;
    const bool custom = static_cast<bool>(options_.body_too_large);
    exchange.Respond(413, custom ? options_.body_too_large_content_type : "text/plain",
                     custom ? options_.body_too_large(max)
                            : absl::StrCat("request body exceeds the limit of ", max, " bytes\n"));
    State::HandlerDone(state);
    return;
  }
  if (allowed.empty()) {
    const std::string message = absl::StrCat("no route for ", request.method, " ", request.path);
    exchange.Respond(404, options_.error_body ? options_.error_content_type : "text/plain",
                     options_.error_body ? options_.error_body(404, message) : message + "\n");
    State::HandlerDone(state);
    return;
  }
  if (route == nullptr) {
    const std::string allow = absl::StrJoin(allowed, ", ");
    const std::string message = absl::StrCat("method ", request.method, " not allowed on ",
                                             request.path, " (allowed: ", allow, ")");
    exchange.Respond(405, options_.error_body ? options_.error_content_type : "text/plain",
                     options_.error_body
                         ? options_.error_body(405, message)
                         : absl::StrCat("method ", request.method, " not allowed\n"),
                     {{"Allow", allow}});
    State::HandlerDone(state);
    return;
  }
  pool_->Enqueue([state, handler = &route->handler] {
    {
      HttpExchange handler_exchange(state);
      (*handler)(handler_exchange);
    }
    State::HandlerDone(state);
  });
}

void HttpServer::Stop() {
  if (loop_ == nullptr) return;
  loop_->StopAccepting();
  pool_->Shutdown();  // every handler returns, its bytes posted to the loop
  loop_->Shutdown();
  loop_.reset();
}

HttpServer::~HttpServer() { Stop(); }

}  // namespace tandem
