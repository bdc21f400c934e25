#include "serving/http_server.h"

#include <httplib.h>
#include <poll.h>
#include <sys/socket.h>

#include <csignal>
#include <deque>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "serving/on_demand_pool.h"
#include "serving/socket_finder.h"

namespace tandem {

// One request: a copy of what the handler reads, and the response it produces. The handler's
// thread fills the response; the connection's thread sends it.
struct HttpExchange::State {
  std::string method;
  std::string path;
  httplib::Headers request_headers;
  std::string body;

  absl::Mutex mu;
  enum class Phase { kPending, kWhole, kStream } phase ABSL_GUARDED_BY(mu) = Phase::kPending;
  int status ABSL_GUARDED_BY(mu) = 0;
  std::string content_type ABSL_GUARDED_BY(mu);
  Headers headers ABSL_GUARDED_BY(mu);
  std::string whole_body ABSL_GUARDED_BY(mu);
  std::deque<std::string> chunks ABSL_GUARDED_BY(mu);
  bool ended ABSL_GUARDED_BY(mu) = false;         // EndStream called
  bool gone ABSL_GUARDED_BY(mu) = false;          // the client is gone
  bool handler_done ABSL_GUARDED_BY(mu) = false;  // the handler returned
  std::function<void()> on_gone ABSL_GUARDED_BY(mu);

  void MarkGone() {
    absl::MutexLock lock(&mu);
    if (gone) return;
    gone = true;
    if (on_gone) on_gone();
  }
};

void HttpExchange::OnClientGone(std::function<void()> fn) {
  absl::MutexLock lock(&state_->mu);
  state_->on_gone = std::move(fn);
  if (state_->gone && state_->on_gone) state_->on_gone();
}

std::string HttpExchange::method() const { return state_->method; }
std::string HttpExchange::path() const { return state_->path; }

std::optional<std::string> HttpExchange::header(const char* name) const {
  // httplib::Headers compares names case-insensitively.
  const auto it = state_->request_headers.find(name);
  if (it == state_->request_headers.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<std::string> HttpExchange::ReadBody(size_t max_bytes) {
  if (state_->body.size() > max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("request body of ", state_->body.size(),
                                                     " bytes exceeds the limit of ", max_bytes));
  }
  return state_->body;
}

bool HttpExchange::responded() const {
  absl::MutexLock lock(&state_->mu);
  return state_->phase != State::Phase::kPending;
}

bool HttpExchange::Respond(int status, absl::string_view content_type, absl::string_view body,
                           const Headers& headers) {
  absl::MutexLock lock(&state_->mu);
  if (state_->phase != State::Phase::kPending) return false;
  state_->phase = State::Phase::kWhole;
  state_->status = status;
  state_->content_type = std::string(content_type);
  state_->headers = headers;
  state_->whole_body = std::string(body);
  return true;
}

bool HttpExchange::StartStream(int status, absl::string_view content_type, const Headers& headers) {
  absl::MutexLock lock(&state_->mu);
  if (state_->phase != State::Phase::kPending) return false;
  state_->phase = State::Phase::kStream;
  state_->status = status;
  state_->content_type = std::string(content_type);
  state_->headers = headers;
  return true;
}

bool HttpExchange::WriteChunk(absl::string_view data) {
  absl::MutexLock lock(&state_->mu);
  if (state_->phase != State::Phase::kStream || state_->ended || state_->gone) return false;
  if (!data.empty()) state_->chunks.emplace_back(data);
  return true;
}

bool HttpExchange::EndStream() {
  absl::MutexLock lock(&state_->mu);
  if (state_->phase != State::Phase::kStream || state_->gone) return false;
  state_->ended = true;
  return true;
}

namespace {

// cpp-httplib's connection threads: started on demand (serving/on_demand_pool.h), so a server
// allowed `threads` connections holds only as many threads as it has served at once.
class OnDemandTaskQueue final : public httplib::TaskQueue {
 public:
  explicit OnDemandTaskQueue(size_t max_threads) : pool_(max_threads) {}
  void enqueue(std::function<void()> fn) override { pool_.Enqueue(std::move(fn)); }
  void shutdown() override { pool_.Shutdown(); }

 private:
  OnDemandPool pool_;
};

using State = HttpExchange::State;

constexpr absl::Duration kWatchInterval = absl::Milliseconds(100);

// The sockets of the requests' connections (socket_finder.h): one per process, as the
// descriptors are.
SocketFinder& Sockets() {
  static SocketFinder* const finder = new SocketFinder();
  return *finder;
}

// Watches one request's connection for the client closing it. cpp-httplib does not hand out the
// socket, so it is found by its addresses (once, only for a request that takes a while).
class ConnectionWatch {
 public:
  explicit ConnectionWatch(const httplib::Request& req)
      : remote_addr_(req.remote_addr), remote_port_(req.remote_port), local_port_(req.local_port) {}

  // True when the peer closed (or reset) the connection.
  bool Closed() {
    if (!looked_) {
      looked_ = true;
      fd_ = Sockets().Find(remote_addr_, remote_port_, local_port_);
    }
    if (fd_ < 0) return false;
    pollfd p{fd_, POLLRDHUP, 0};
    return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
  }

 private:
  const std::string remote_addr_;
  const int remote_port_;
  const int local_port_;
  bool looked_ = false;
  int fd_ = -1;
};

// Runs `handler` on its own thread; returns once it responded (or returned without responding)
// and fills `res`. A stream's chunks are then sent by `res`'s content provider, on this
// connection's thread; the handler's thread is joined when the response is released.
void Serve(const HttpHandler& handler, const httplib::Request& req, httplib::Response& res) {
  auto state = std::make_shared<State>();
  state->method = req.method;
  state->path = req.path;
  state->request_headers = req.headers;
  state->body = req.body;
  auto thread = std::make_shared<std::thread>([state, &handler] {
    {
      HttpExchange exchange(state);
      handler(exchange);
    }
    absl::MutexLock lock(&state->mu);
    state->handler_done = true;
  });
  auto join = [thread] {
    if (thread->joinable()) thread->join();
  };
  auto watch = std::make_shared<ConnectionWatch>(req);
  State::Phase phase;
  {
    absl::MutexLock lock(&state->mu);
    while (!state->mu.AwaitWithTimeout(absl::Condition(
                                           +[](State* s) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                                             return s->phase != State::Phase::kPending ||
                                                    s->handler_done;
                                           },
                                           state.get()),
                                       kWatchInterval)) {
      if (!state->gone && watch->Closed()) {
        state->gone = true;
        if (state->on_gone) state->on_gone();
      }
    }
    phase = state->phase;
    if (phase == State::Phase::kPending) {
      res.status = 500;
      res.set_content("handler sent no response\n", "text/plain");
    } else {
      res.status = state->status;
      for (const auto& [name, value] : state->headers) res.set_header(name, value);
    }
    if (phase == State::Phase::kWhole) res.set_content(state->whole_body, state->content_type);
  }
  if (phase != State::Phase::kStream) {
    join();
    return;
  }
  std::string content_type;
  {
    absl::MutexLock lock(&state->mu);
    content_type = state->content_type;
  }
  res.set_chunked_content_provider(
      content_type,
      [state, watch](size_t, httplib::DataSink& sink) {
        while (true) {
          std::string chunk;
          {
            absl::MutexLock lock(&state->mu);
            while (!state->mu.AwaitWithTimeout(absl::Condition(
                                                   +[](State* s) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                                                     return !s->chunks.empty() || s->ended ||
                                                            s->handler_done;
                                                   },
                                                   state.get()),
                                               kWatchInterval)) {
              if (!state->gone && watch->Closed()) {
                state->gone = true;
                if (state->on_gone) state->on_gone();
              }
            }
            if (state->chunks.empty()) break;  // ended, or the handler returned
            chunk = std::move(state->chunks.front());
            state->chunks.pop_front();
          }
          if (!sink.write(chunk.data(), chunk.size())) {
            state->MarkGone();
            return false;
          }
        }
        sink.done();
        return true;
      },
      [state, join](bool success) {
        if (!success) state->MarkGone();
        join();
      });
}

}  // namespace

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
  const int threads = options.threads;
  const size_t colon = listen.rfind(':');
  int32_t port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(absl::string_view(listen).substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("HTTP listen address '", listen, "' is not HOST:PORT"));
  }
  if (threads < 1) {
    return absl::InvalidArgumentError(absl::StrCat("HTTP threads must be >= 1, got ", threads));
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
  // A client that goes away must not kill the process with SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  std::unique_ptr<HttpServer> server(new HttpServer());
  server->routes_ = std::move(routes);
  if (options.tls_cert_file.empty()) {
    server->server_ = std::make_unique<httplib::Server>();
  } else {
    auto https = std::make_unique<httplib::SSLServer>(options.tls_cert_file.c_str(),
                                                      options.tls_key_file.c_str());
    if (!https->is_valid()) {
      return absl::InvalidArgumentError(absl::StrCat("HTTPS: cannot load certificate ",
                                                     options.tls_cert_file, " with key ",
                                                     options.tls_key_file));
    }
    server->server_ = std::move(https);
  }
  httplib::Server& svr = *server->server_;
  svr.new_task_queue = [threads] { return new OnDemandTaskQueue(static_cast<size_t>(threads)); };
  svr.set_payload_max_length(options.max_body_bytes);
  // cpp-httplib answers a body over the limit with a bare 413 before any route runs; give it a
  // body that names the limit (the router's is an OpenAI error object).
  svr.set_error_handler(httplib::Server::HandlerWithResponse(
      [max = options.max_body_bytes, make = options.body_too_large,
       type = options.body_too_large_content_type, error_body = options.error_body,
       error_type = options.error_content_type](const httplib::Request& req,
                                                httplib::Response& res) {
        if (res.status == 404 && res.body.empty()) {
          const std::string message = absl::StrCat("no route for ", req.method, " ", req.path);
          res.set_content(error_body ? error_body(404, message) : message + "\n",
                          error_body ? error_type : "text/plain");
          return httplib::Server::HandlerResponse::Handled;
        }
        if (res.status != 413 || !res.body.empty())
          return httplib::Server::HandlerResponse::Unhandled;
        res.set_content(
            make ? make(max) : absl::StrCat("request body exceeds the limit of ", max, " bytes\n"),
            make ? type : "text/plain");
        return httplib::Server::HandlerResponse::Handled;
      }));
  // Group the routes by path: each path answers its methods, and 405 to GET/POST otherwise.
  std::vector<std::string> paths;
  for (const HttpRoute& route : server->routes_) {
    if (std::find(paths.begin(), paths.end(), route.path) == paths.end()) {
      paths.push_back(route.path);
    }
  }
  for (const std::string& path : paths) {
    std::vector<std::string> allowed;
    const HttpRoute* get = nullptr;
    const HttpRoute* post = nullptr;
    for (const HttpRoute& route : server->routes_) {
      if (route.path != path) continue;
      allowed.push_back(route.method);
      if (route.method == "GET") get = &route;
      if (route.method == "POST") post = &route;
    }
    auto handler_for = [allow = absl::StrJoin(allowed, ", "), error_body = options.error_body,
                        error_type = options.error_content_type](const HttpRoute* route) {
      return [route, allow, error_body, error_type](const httplib::Request& req,
                                                    httplib::Response& res) {
        if (route == nullptr) {
          res.status = 405;
          res.set_header("Allow", allow);
          const std::string message = absl::StrCat("method ", req.method, " not allowed on ",
                                                   req.path, " (allowed: ", allow, ")");
          if (error_body) {
            res.set_content(error_body(405, message), error_type);
          } else {
            res.set_content(absl::StrCat("method ", req.method, " not allowed\n"), "text/plain");
          }
          return;
        }
        Serve(route->handler, req, res);
      };
    };
    // httplib matches patterns as regular expressions; the paths are plain, so escape dots.
    std::string pattern;
    for (char c : path) {
      if (c == '.') pattern += '\\';
      pattern += c;
    }
    svr.Get(pattern, handler_for(get));
    svr.Post(pattern, handler_for(post));
  }
  if (options.on_response) {
    // cpp-httplib's logger runs after every response is written, whatever answered it.
    svr.set_logger([paths, observe = options.on_response](const httplib::Request& req,
                                                          const httplib::Response& res) {
      const bool routed = std::find(paths.begin(), paths.end(), req.path) != paths.end();
      observe(routed ? req.path : std::string(), res.status);
    });
  }
  // cpp-httplib 0.11 listens with a backlog of 5 and has no setting for it (a burst of
  // connections then stalls: docs/PERFORMANCE.md). The socket-options hook sees the listening
  // socket before bind, and Linux lets listen() raise the backlog of a listening socket.
  int listen_fd = -1;
  svr.set_socket_options([&listen_fd](int fd) {
    listen_fd = fd;
    httplib::default_socket_options(fd);
  });
  if (port == 0) {
    server->port_ = svr.bind_to_any_port(host);
  } else if (svr.bind_to_port(host, port)) {
    server->port_ = port;
  }
  if (server->port_ <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve HTTP on ", listen));
  }
  if (::listen(listen_fd, 4096) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot raise the listen backlog on ", listen));
  }
  server->listener_ = std::thread([&svr] { svr.listen_after_bind(); });
  // stop() is a no-op until the accept loop runs: wait for it (bounded) so Stop always works.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!svr.is_running()) {
    if (absl::Now() > deadline) {
      return absl::UnavailableError(absl::StrCat("HTTP server on ", listen, " did not start"));
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
  return server;
}

void HttpServer::Stop() {
  if (!listener_.joinable()) return;
  server_->stop();
  listener_.join();
}

HttpServer::~HttpServer() {
  if (listener_.joinable() && !server_->is_running()) {
    // Start failed after launching the listener: it ends once stop() can see it running.
    while (!server_->is_running()) absl::SleepFor(absl::Milliseconds(1));
  }
  Stop();
}

}  // namespace tandem
