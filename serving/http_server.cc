#include "serving/http_server.h"

#include <civetweb.h>
#include <strings.h>

#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tandem {
// The routes of one path, handed to CivetWeb as the path's callback data.
struct HttpServer::PathRoutes {
  std::string pattern;  // CivetWeb URI pattern: the path + "$" (exact match)
  std::vector<const HttpRoute*> routes;
};

std::string HttpExchange::method() const {
  const char* m = mg_get_request_info(conn_)->request_method;
  return m == nullptr ? "" : m;
}

std::string HttpExchange::path() const {
  const char* uri = mg_get_request_info(conn_)->local_uri;
  return uri == nullptr ? "" : uri;
}

std::optional<std::string> HttpExchange::header(const char* name) const {
  const char* value = mg_get_header(conn_, name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

absl::StatusOr<std::string> HttpExchange::ReadBody(size_t max_bytes) {
  std::string body;
  const long long declared = mg_get_request_info(conn_)->content_length;
  if (declared > 0 && static_cast<unsigned long long>(declared) > max_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("request body of ", declared, " bytes exceeds the limit of ", max_bytes));
  }
  char buf[16384];
  while (true) {
    const int n = mg_read(conn_, buf, sizeof(buf));
    if (n < 0) return absl::UnavailableError("connection failed while reading the request body");
    if (n == 0) break;
    if (body.size() + static_cast<size_t>(n) > max_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("request body exceeds the limit of ", max_bytes, " bytes"));
    }
    body.append(buf, static_cast<size_t>(n));
  }
  return body;
}

bool HttpExchange::SendHeaders(int status, absl::string_view content_type, const Headers& headers,
                               std::optional<size_t> content_length) {
  responded_ = true;
  if (mg_response_header_start(conn_, status) < 0) return false;
  const std::string type(content_type);
  mg_response_header_add(conn_, "Content-Type", type.c_str(), -1);
  if (content_length.has_value()) {
    const std::string length = absl::StrCat(*content_length);
    mg_response_header_add(conn_, "Content-Length", length.c_str(), -1);
  } else {
    mg_response_header_add(conn_, "Transfer-Encoding", "chunked", -1);
  }
  for (const auto& [name, value] : headers) {
    mg_response_header_add(conn_, name.c_str(), value.c_str(), -1);
  }
  return mg_response_header_send(conn_) >= 0;
}

bool HttpExchange::Respond(int status, absl::string_view content_type, absl::string_view body,
                           const Headers& headers) {
  if (!SendHeaders(status, content_type, headers, body.size())) return false;
  return body.empty() || mg_write(conn_, body.data(), body.size()) > 0;
}

bool HttpExchange::StartStream(int status, absl::string_view content_type, const Headers& headers) {
  return SendHeaders(status, content_type, headers, std::nullopt);
}

bool HttpExchange::WriteChunk(absl::string_view data) {
  if (data.empty()) return true;  // an empty chunk would end the stream
  return mg_send_chunk(conn_, data.data(), static_cast<unsigned int>(data.size())) > 0;
}

bool HttpExchange::EndStream() { return mg_send_chunk(conn_, "", 0) >= 0; }

int HttpServer::Dispatch(mg_connection* conn, void* data) {
  const auto* entry = static_cast<const PathRoutes*>(data);
  HttpExchange exchange(conn);
  const std::string method = exchange.method();
  std::vector<std::string> allowed;
  for (const HttpRoute* route : entry->routes) {
    if (route->method == method) {
      route->handler(exchange);
      if (!exchange.responded()) {
        exchange.Respond(500, "text/plain", "handler sent no response\n");
        return 500;
      }
      return 200;
    }
    allowed.push_back(route->method);
  }
  exchange.Respond(405, "text/plain", absl::StrCat("method ", method, " not allowed\n"),
                   {{"Allow", absl::StrJoin(allowed, ", ")}});
  return 405;
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& listen,
                                                              int threads,
                                                              std::vector<HttpRoute> routes) {
  const size_t colon = listen.rfind(':');
  int32_t port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(absl::string_view(listen).substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("HTTP listen address '", listen, "' is not IP:PORT"));
  }
  if (threads < 1) {
    return absl::InvalidArgumentError(absl::StrCat("HTTP threads must be >= 1, got ", threads));
  }
  std::unique_ptr<HttpServer> server(new HttpServer());
  server->routes_ = std::move(routes);
  mg_init_library(0);
  const std::string thread_count = absl::StrCat(threads);
  const char* options[] = {"listening_ports",
                           listen.c_str(),
                           "num_threads",
                           thread_count.c_str(),
                           "enable_keep_alive",
                           "yes",
                           "listen_backlog",
                           "4096",
                           nullptr};
  mg_callbacks callbacks{};
  mg_init_data init{&callbacks, nullptr, options};
  char error_text[256] = "";
  unsigned error_code = 0;
  mg_error_data error{&error_code, error_text, sizeof(error_text)};
  server->ctx_ = mg_start2(&init, &error);
  if (server->ctx_ == nullptr) {
    mg_exit_library();
    return absl::UnavailableError(absl::StrCat("cannot serve HTTP on ", listen, ": ", error_text));
  }
  mg_server_port ports[1];
  if (mg_get_server_ports(server->ctx_, 1, ports) < 1) {
    server->Stop();
    return absl::UnavailableError(absl::StrCat("HTTP server on ", listen, " has no port"));
  }
  server->port_ = ports[0].port;
  // Group the routes by path; CivetWeb calls one handler per path with that path's entry.
  for (const HttpRoute& route : server->routes_) {
    PathRoutes* entry = nullptr;
    for (auto& e : server->paths_) {
      if (e->pattern == route.path + "$") entry = e.get();
    }
    if (entry == nullptr) {
      server->paths_.push_back(std::make_unique<PathRoutes>());
      entry = server->paths_.back().get();
      entry->pattern = route.path + "$";
    }
    entry->routes.push_back(&route);
  }
  for (const auto& entry : server->paths_) {
    mg_set_request_handler(server->ctx_, entry->pattern.c_str(), &HttpServer::Dispatch,
                           entry.get());
  }
  return server;
}

void HttpServer::Stop() {
  if (ctx_ == nullptr) return;
  mg_stop(ctx_);
  ctx_ = nullptr;
  mg_exit_library();
}

HttpServer::~HttpServer() { Stop(); }

}  // namespace tandem
