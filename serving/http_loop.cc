#include "serving/http_loop.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"

namespace tandem {
namespace {

using State = HttpExchange::State;

// Bytes a connection buffers unread while its request is answered (pipelined requests); reading
// pauses beyond it.
constexpr size_t kReadHighWater = 256 << 10;
// How long a connection refused with 413 is read (and discarded) for the client to see the
// response before the close.
constexpr absl::Duration kLingerAfterRefusal = absl::Seconds(2);
// How long Shutdown waits for output to drain.
constexpr absl::Duration kShutdownDrain = absl::Seconds(2);
// How long accepting pauses after accept() failed (out of file descriptors: the pending
// connection stays readable, so accepting on at once would spin).
constexpr absl::Duration kAcceptPause = absl::Milliseconds(100);

std::string PlainResponse(int status, absl::string_view text) {
  return HttpResponseHead(status, "text/plain", {}, text.size(), /*keep_alive=*/false) +
         std::string(text);
}

}  // namespace

struct HttpLoop::Conn {
  Conn(HttpLoop* l, bufferevent* b, size_t max_body) : loop(l), bev(b), reader(max_body) {}

  HttpLoop* const loop;
  bufferevent* const bev;
  HttpRequestReader reader;
  int served = 0;                   // requests handed out on this connection
  bool answering = false;           // a request was handed out; its response is not written yet
  std::shared_ptr<State> exchange;  // that request, until its last byte was handed to `bev`
  bool continue_sent = false;       // "100 Continue" written for the request being read
  bool close_after = false;         // close once the response is written
  bool discard = false;             // refused (413, 400): input is discarded until EOF
  bool report_owed = false;         // on_response once the output drained
  std::string report_route;
  int report_status = 0;

  static void OnRead(bufferevent* bev, void* arg);
  static void OnWrite(bufferevent* bev, void* arg);
  static void OnEvent(bufferevent* bev, short what, void* arg);

  void SetReadTimeout(std::optional<absl::Duration> read) {
    const timeval write_tv = absl::ToTimeval(kIdleTimeout);
    if (read.has_value()) {
      const timeval read_tv = absl::ToTimeval(*read);
      bufferevent_set_timeouts(bev, &read_tv, &write_tv);
    } else {
      bufferevent_set_timeouts(bev, nullptr, &write_tv);
    }
  }
  void Parse();
  void Hand(bool too_large);
  void Finish();
  void Close();
  void Report() {
    if (!report_owed) return;
    report_owed = false;
    if (loop->options_.on_response) loop->options_.on_response(report_route, report_status);
  }
};

void HttpLoop::Conn::OnRead(bufferevent* bev, void* arg) {
  Conn* c = static_cast<Conn*>(arg);
  evbuffer* input = bufferevent_get_input(bev);
  if (c->discard) {
    evbuffer_drain(input, evbuffer_get_length(input));
    return;
  }
  if (c->answering) return;  // read on after the response (EOF is still seen meanwhile)
  c->Parse();
}

void HttpLoop::Conn::OnWrite(bufferevent*, void* arg) {
  Conn* c = static_cast<Conn*>(arg);
  if (c->answering && c->exchange == nullptr) c->Finish();
}

void HttpLoop::Conn::OnEvent(bufferevent*, short what, void* arg) {
  Conn* c = static_cast<Conn*>(arg);
  if ((what & (BEV_EVENT_EOF | BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT)) == 0) return;  // TLS up
  if ((what & BEV_EVENT_EOF) != 0 && (what & BEV_EVENT_READING) != 0 && c->answering &&
      c->exchange == nullptr && evbuffer_get_length(bufferevent_get_output(c->bev)) > 0) {
    // The client stopped sending after its request; the whole response is queued: write it.
    c->close_after = true;
    c->discard = false;
    return;
  }
  c->Close();
}

void HttpLoop::Conn::Parse() {
  evbuffer* input = bufferevent_get_input(bev);
  while (evbuffer_get_length(input) > 0) {
    evbuffer_iovec v;
    if (evbuffer_peek(input, -1, nullptr, &v, 1) < 1) return;
    size_t consumed = 0;
    const HttpRequestReader::Result result =
        reader.Feed(absl::string_view(static_cast<const char*>(v.iov_base), v.iov_len), &consumed);
    evbuffer_drain(input, consumed);
    switch (result) {
      case HttpRequestReader::Result::kNeedMore:
        if (reader.request().expect_continue && !continue_sent) {
          continue_sent = true;
          bufferevent_write(bev, kHttpContinue.data(), kHttpContinue.size());
        }
        continue;
      case HttpRequestReader::Result::kRequest:
        Hand(/*too_large=*/false);
        return;
      case HttpRequestReader::Result::kTooLarge:
        Hand(/*too_large=*/true);
        return;
      case HttpRequestReader::Result::kBad: {
        const std::string response =
            PlainResponse(400, absl::StrCat("bad request: ", reader.error(), "\n"));
        answering = true;
        discard = true;
        close_after = true;
        report_owed = true;
        report_route.clear();
        report_status = 400;
        SetReadTimeout(std::nullopt);
        bufferevent_write(bev, response.data(), response.size());
        evbuffer_drain(input, evbuffer_get_length(input));
        return;
      }
    }
  }
}

void HttpLoop::Conn::Hand(bool too_large) {
  if (loop->stopping_) {
    Close();
    return;
  }
  ++served;
  answering = true;
  continue_sent = false;
  auto state = std::make_shared<State>();
  state->request = std::move(reader.request());
  state->keep_alive = !too_large && state->request.keep_alive && served < kMaxRequestsPerConnection;
  state->outbox = loop;
  state->conn = this;
  exchange = state;
  if (too_large) discard = true;  // the rest of the body is not read
  SetReadTimeout(std::nullopt);   // a stream may be quiet for long; EOF still closes
  loop->options_.on_request(std::move(state), too_large);
}

void HttpLoop::Conn::Finish() {
  Report();
  answering = false;
  if (loop->closing_) {
    Close();
    return;
  }
  if (close_after) {
    if (discard) {
      // The client may still be sending the body: read (and drop) it until its EOF or this
      // timeout, so that closing with unread bytes does not reset the connection before the
      // client read the refusal. Plain TCP also tells the client at once that nothing follows.
      if (loop->options_.tls == nullptr) ::shutdown(bufferevent_getfd(bev), SHUT_WR);
      SetReadTimeout(kLingerAfterRefusal);
      return;
    }
    Close();
    return;
  }
  reader.Next();
  SetReadTimeout(kIdleTimeout);
  Parse();
}

void HttpLoop::Conn::Close() {
  if (exchange != nullptr) {
    exchange->conn = nullptr;  // its on_response comes when its handler is done
    exchange->MarkGone();
    exchange.reset();
  }
  Report();
  bufferevent_free(bev);
  auto& conns = loop->conns_;
  conns.erase(std::find(conns.begin(), conns.end(), this));
  HttpLoop* l = loop;
  delete this;
  if (l->closing_ && l->conns_.empty()) event_base_loopexit(l->base_, nullptr);
}

HttpLoop::HttpLoop(Options options) : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<HttpLoop>> HttpLoop::Start(const std::string& host, int port,
                                                          Options options) {
  std::unique_ptr<HttpLoop> loop(new HttpLoop(std::move(options)));
  loop->base_ = event_base_new();
  if (loop->base_ == nullptr) return absl::InternalError("libevent: cannot create an event base");
  addrinfo hints;
  std::memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* addresses = nullptr;
  const std::string port_text = std::to_string(port);
  const int rc =
      ::getaddrinfo(host.empty() ? nullptr : host.c_str(), port_text.c_str(), &hints, &addresses);
  if (rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve HTTP on ", host, ":", port, ": ", gai_strerror(rc)));
  }
  for (addrinfo* a = addresses; a != nullptr && loop->listener_ == nullptr; a = a->ai_next) {
    loop->listener_ =
        evconnlistener_new_bind(loop->base_, &HttpLoop::OnAccept, loop.get(),
                                LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC,
                                /*backlog=*/4096, a->ai_addr, static_cast<int>(a->ai_addrlen));
  }
  ::freeaddrinfo(addresses);
  if (loop->listener_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot serve HTTP on ", host, ":", port));
  }
  evconnlistener_set_error_cb(loop->listener_, &HttpLoop::OnAcceptError);
  loop->accept_resume_ = evtimer_new(
      loop->base_,
      [](int, short, void* arg) {
        HttpLoop* self = static_cast<HttpLoop*>(arg);
        if (self->listener_ != nullptr) evconnlistener_enable(self->listener_);
      },
      loop.get());
  if (loop->accept_resume_ == nullptr) {
    return absl::InternalError("libevent: cannot create the HTTP loop's accept timer");
  }
  sockaddr_storage bound;
  socklen_t bound_len = sizeof(bound);
  if (::getsockname(evconnlistener_get_fd(loop->listener_), reinterpret_cast<sockaddr*>(&bound),
                    &bound_len) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot read the HTTP port of ", host));
  }
  loop->port_ =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                        : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  loop->wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (loop->wake_fd_ < 0) return absl::InternalError("cannot create the HTTP loop's eventfd");
  loop->wake_event_ =
      event_new(loop->base_, loop->wake_fd_, EV_READ | EV_PERSIST, &HttpLoop::OnWake, loop.get());
  if (loop->wake_event_ == nullptr || event_add(loop->wake_event_, nullptr) != 0) {
    return absl::InternalError("libevent: cannot add the HTTP loop's wake event");
  }
  HttpLoop* self = loop.get();
  loop->thread_ = std::thread([self] { event_base_dispatch(self->base_); });
  return loop;
}

HttpLoop::~HttpLoop() {
  Shutdown();
  for (Conn* c : std::vector<Conn*>(conns_)) c->Close();  // only when the thread never ran
  if (listener_ != nullptr) evconnlistener_free(listener_);
  if (wake_event_ != nullptr) event_free(wake_event_);
  if (close_deadline_ != nullptr) event_free(close_deadline_);
  if (accept_resume_ != nullptr) event_free(accept_resume_);
  if (base_ != nullptr) event_base_free(base_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void HttpLoop::OnAccept(evconnlistener*, int fd, sockaddr*, int, void* arg) {
  HttpLoop* loop = static_cast<HttpLoop*>(arg);
  if (loop->stopping_) {
    ::close(fd);
    return;
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // an SSE event goes out now
  bufferevent* bev = nullptr;
  if (loop->options_.tls != nullptr) {
    SSL* ssl = SSL_new(loop->options_.tls.get());
    if (ssl != nullptr) {
      bev = bufferevent_openssl_socket_new(loop->base_, fd, ssl, BUFFEREVENT_SSL_ACCEPTING,
                                           BEV_OPT_CLOSE_ON_FREE);
      if (bev == nullptr) SSL_free(ssl);
    }
    if (bev != nullptr) bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
  } else {
    bev = bufferevent_socket_new(loop->base_, fd, BEV_OPT_CLOSE_ON_FREE);
  }
  if (bev == nullptr) {
    ::close(fd);
    return;
  }
  Conn* c = new Conn(loop, bev, loop->options_.max_body_bytes);
  loop->conns_.push_back(c);
  bufferevent_setcb(bev, &Conn::OnRead, &Conn::OnWrite, &Conn::OnEvent, c);
  bufferevent_setwatermark(bev, EV_READ, 0, kReadHighWater);
  c->SetReadTimeout(kIdleTimeout);
  bufferevent_enable(bev, EV_READ | EV_WRITE);
}

void HttpLoop::OnAcceptError(evconnlistener* listener, void* arg) {
  HttpLoop* loop = static_cast<HttpLoop*>(arg);
  evconnlistener_disable(listener);
  const timeval pause = absl::ToTimeval(kAcceptPause);
  evtimer_add(loop->accept_resume_, &pause);
}

void HttpLoop::Post(std::shared_ptr<State> state) {
  bool wake;
  {
    absl::MutexLock lock(&mu_);
    posted_.push_back(std::move(state));
    wake = !woken_;
    woken_ = true;
  }
  if (wake) Wake();
}

void HttpLoop::Wake() {
  const uint64_t one = 1;
  // EAGAIN only when the counter is saturated: the loop is woken anyway.
  [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof(one));
}

void HttpLoop::OnWake(int fd, short, void* arg) {
  uint64_t count;
  [[maybe_unused]] const ssize_t n = ::read(fd, &count, sizeof(count));
  static_cast<HttpLoop*>(arg)->Drain();
}

void HttpLoop::Drain() {
  std::vector<std::shared_ptr<State>> posted;
  std::vector<std::function<void()>> commands;
  {
    absl::MutexLock lock(&mu_);
    posted.swap(posted_);
    commands.swap(commands_);
    woken_ = false;
  }
  // Output first: a command (Shutdown) comes after the bytes posted before it.
  for (const std::shared_ptr<State>& state : posted) Apply(state);
  for (std::function<void()>& command : commands) command();
}

void HttpLoop::Apply(const std::shared_ptr<State>& state) {
  std::string bytes;
  State::Phase phase;
  bool ended, handler_done;
  int status;
  {
    absl::MutexLock lock(&state->mu);
    bytes.swap(state->pending);
    state->queued = false;
    phase = state->phase;
    ended = state->ended;
    handler_done = state->handler_done;
    status = phase == State::Phase::kPending ? 500 : state->status;
  }
  Conn* c = static_cast<Conn*>(state->conn);
  if (c == nullptr) {  // answered already, or the connection closed
    if (handler_done && !state->reported) {
      state->reported = true;
      if (options_.on_response) options_.on_response(state->route, status);
    }
    return;
  }
  bool complete = false;
  if (phase == State::Phase::kWhole) {
    complete = true;
  } else if (phase == State::Phase::kStream && (ended || handler_done)) {
    if (!ended) bytes.append(kHttpLastChunk.data(), kHttpLastChunk.size());
    complete = true;
  } else if (handler_done) {
    constexpr absl::string_view kNoResponse = "handler sent no response\n";
    bytes = HttpResponseHead(500, "text/plain", {}, kNoResponse.size(), state->keep_alive);
    bytes.append(kNoResponse.data(), kNoResponse.size());
    complete = true;
  }
  if (!bytes.empty()) bufferevent_write(c->bev, bytes.data(), bytes.size());
  if (!complete) return;
  state->conn = nullptr;
  state->reported = true;
  c->exchange.reset();
  c->report_owed = true;
  c->report_route = state->route;
  c->report_status = status;
  if (!state->keep_alive) c->close_after = true;
  if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0) c->Finish();
}

void HttpLoop::RunOnLoop(std::function<void()> fn) {
  auto done = std::make_shared<absl::Notification>();
  {
    absl::MutexLock lock(&mu_);
    commands_.push_back([fn = std::move(fn), done] {
      fn();
      done->Notify();
    });
    woken_ = true;
  }
  Wake();
  done->WaitForNotificationWithTimeout(absl::Seconds(10));
}

void HttpLoop::StopAccepting() {
  if (!thread_.joinable()) return;
  RunOnLoop([this] {
    stopping_ = true;
    if (listener_ != nullptr) evconnlistener_free(listener_);
    listener_ = nullptr;
  });
}

void HttpLoop::CloseAll() {
  for (Conn* c : std::vector<Conn*>(conns_)) c->Close();
}

void HttpLoop::Shutdown() {
  if (!thread_.joinable()) return;
  RunOnLoop([this] {
    stopping_ = true;
    closing_ = true;
    if (listener_ != nullptr) evconnlistener_free(listener_);
    listener_ = nullptr;
    // A connection still writing a response closes once it is written (Finish); the rest now.
    for (Conn* c : std::vector<Conn*>(conns_)) {
      const bool writing = c->answering && c->exchange == nullptr &&
                           evbuffer_get_length(bufferevent_get_output(c->bev)) > 0;
      if (!writing) c->Close();
    }
    if (conns_.empty()) {
      event_base_loopexit(base_, nullptr);
      return;
    }
    close_deadline_ = evtimer_new(
        base_,
        [](int, short, void* arg) {
          HttpLoop* loop = static_cast<HttpLoop*>(arg);
          loop->CloseAll();
          event_base_loopexit(loop->base_, nullptr);
        },
        this);
    const timeval deadline = absl::ToTimeval(kShutdownDrain);
    evtimer_add(close_deadline_, &deadline);
  });
  thread_.join();
}

}  // namespace tandem
