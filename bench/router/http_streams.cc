// RunHttpStreams (capacity_clients.h): POST /v1/completions with stream=true per stream, through
// libcurl's multi socket interface on epoll, on kClientThreads threads (stream i on thread
// i % kClientThreads); a token is a `data:` event whose first choice carries text.
#include <curl/curl.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "bench/router/capacity_clients.h"
#include "nlohmann/json.hpp"

namespace tandem::bench {
namespace {

constexpr int kClientThreads = 2;

struct HttpStream {
  StreamResult* result = nullptr;
  std::string body;
  std::string pending;  // bytes after the last complete line
  bool done_event = false;
  curl_slist* headers = nullptr;
  CURL* easy = nullptr;
};

// One complete SSE line. A token is an event whose first choice carries text: the router writes
// one choice per event, so the event's "text" string is looked at without a JSON parse (which cost
// the client thread more than the router spent relaying the token).
void OnLine(HttpStream& s, const std::string& line) {
  if (!absl::StartsWith(line, "data: ")) return;
  const absl::string_view data = absl::string_view(line).substr(6);
  if (data == "[DONE]") {
    s.done_event = true;
    return;
  }
  constexpr absl::string_view kText = "\"text\":\"";
  const size_t text = data.find(kText);
  if (text != absl::string_view::npos && text + kText.size() < data.size() &&
      data[text + kText.size()] != '"') {
    s.result->token_times.push_back(absl::Now());
  }
}

size_t OnData(char* data, size_t size, size_t n, void* user) {
  HttpStream& s = *static_cast<HttpStream*>(user);
  s.pending.append(data, size * n);
  size_t start = 0;
  for (size_t nl; (nl = s.pending.find('\n', start)) != std::string::npos; start = nl + 1) {
    std::string line = s.pending.substr(start, nl - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    OnLine(s, line);
  }
  s.pending.erase(0, start);
  return size * n;
}

// libcurl's socket interface driven by epoll: curl says which sockets to watch
// (CURLMOPT_SOCKETFUNCTION) and when to call it back (CURLMOPT_TIMERFUNCTION), and a wake costs
// what its ready sockets cost. curl_multi_perform + curl_multi_poll walked every transfer and
// polled every socket on each wake: at 1,000 streams a thread, that walk was the client's CPU.
class CurlEpollLoop {
 public:
  CurlEpollLoop() : multi_(curl_multi_init()), epoll_(epoll_create1(EPOLL_CLOEXEC)) {
    curl_multi_setopt(multi_, CURLMOPT_SOCKETFUNCTION, &CurlEpollLoop::OnSocket);
    curl_multi_setopt(multi_, CURLMOPT_SOCKETDATA, this);
    curl_multi_setopt(multi_, CURLMOPT_TIMERFUNCTION, &CurlEpollLoop::OnTimer);
    curl_multi_setopt(multi_, CURLMOPT_TIMERDATA, this);
  }
  ~CurlEpollLoop() {
    curl_multi_cleanup(multi_);
    close(epoll_);
  }
  CurlEpollLoop(const CurlEpollLoop&) = delete;
  CurlEpollLoop& operator=(const CurlEpollLoop&) = delete;

  CURLM* multi() const { return multi_; }

  // Waits for ready sockets or curl's timer, at most until `latest`, and lets curl handle them.
  void RunOnce(absl::Time latest) {
    absl::Time until = latest;
    if (timer_.has_value()) until = std::min(until, *timer_);
    const int wait_ms = static_cast<int>(std::clamp<int64_t>(
        absl::ToInt64Milliseconds(until - absl::Now() + absl::Milliseconds(1)), 0, 100));
    epoll_event events[256];
    const int n = epoll_wait(epoll_, events, 256, wait_ms);
    int running = 0;
    for (int i = 0; i < n; ++i) {
      int flags = 0;
      if (events[i].events & EPOLLIN) flags |= CURL_CSELECT_IN;
      if (events[i].events & EPOLLOUT) flags |= CURL_CSELECT_OUT;
      if (events[i].events & (EPOLLERR | EPOLLHUP)) flags |= CURL_CSELECT_ERR;
      curl_multi_socket_action(multi_, events[i].data.fd, flags, &running);
    }
    if (timer_.has_value() && *timer_ <= absl::Now()) {
      timer_.reset();  // curl sets the next one from inside the call
      curl_multi_socket_action(multi_, CURL_SOCKET_TIMEOUT, 0, &running);
    }
  }

 private:
  static int OnSocket(CURL*, curl_socket_t fd, int what, void* user, void*) {
    auto* self = static_cast<CurlEpollLoop*>(user);
    if (what == CURL_POLL_REMOVE) {
      epoll_ctl(self->epoll_, EPOLL_CTL_DEL, fd, nullptr);  // curl may have closed it already
      return 0;
    }
    epoll_event event{};
    event.data.fd = fd;
    if (what & CURL_POLL_IN) event.events |= EPOLLIN;
    if (what & CURL_POLL_OUT) event.events |= EPOLLOUT;
    if (epoll_ctl(self->epoll_, EPOLL_CTL_MOD, fd, &event) != 0 && errno == ENOENT) {
      epoll_ctl(self->epoll_, EPOLL_CTL_ADD, fd, &event);
    }
    return 0;
  }

  static int OnTimer(CURLM*, long timeout_ms, void* user) {
    auto* self = static_cast<CurlEpollLoop*>(user);
    if (timeout_ms < 0) {
      self->timer_.reset();
    } else {
      self->timer_ = absl::Now() + absl::Milliseconds(timeout_ms);
    }
    return 0;
  }

  CURLM* const multi_;
  const int epoll_;
  std::optional<absl::Time> timer_;  // when curl wants CURL_SOCKET_TIMEOUT
};

// The streams i with i % kClientThreads == part, on this thread.
void RunPart(const LoadSpec& spec, int part, absl::Time start, std::vector<StreamResult>& results,
             std::vector<HttpStream>& streams) {
  CurlEpollLoop loop;
  CURLM* multi = loop.multi();
  const std::string url = absl::StrCat(spec.target, "/v1/completions");
  const absl::Time deadline = start + spec.timeout;
  int added = part;  // the next stream of this part to start
  int started = 0;
  int ended = 0;
  while (true) {
    const absl::Time now = absl::Now();
    // Start the streams whose time has come (the load's schedule).
    while (added < spec.streams && start + spec.spread * added / spec.streams <= now) {
      HttpStream& s = streams[added];
      s.result = &results[added];
      s.result->client_id = absl::StrCat(spec.id_prefix, added);
      s.body = nlohmann::json{
          {"model", spec.model},
          {"prompt", "hello"},
          {"max_tokens", spec.tokens},
          {"stream",
           true}}.dump();
      s.headers = curl_slist_append(nullptr, "Content-Type: application/json");
      s.headers =
          curl_slist_append(s.headers, absl::StrCat("x-request-id: ", s.result->client_id).c_str());
      s.easy = curl_easy_init();
      curl_easy_setopt(s.easy, CURLOPT_URL, url.c_str());
      curl_easy_setopt(s.easy, CURLOPT_HTTPHEADER, s.headers);
      curl_easy_setopt(s.easy, CURLOPT_POSTFIELDS, s.body.c_str());
      curl_easy_setopt(s.easy, CURLOPT_WRITEFUNCTION, OnData);
      curl_easy_setopt(s.easy, CURLOPT_WRITEDATA, &s);
      curl_easy_setopt(s.easy, CURLOPT_PRIVATE, &s);
      curl_easy_setopt(s.easy, CURLOPT_TCP_NODELAY, 1L);
      curl_easy_setopt(s.easy, CURLOPT_TIMEOUT_MS,
                       static_cast<long>(absl::ToInt64Milliseconds(deadline - now)));
      curl_multi_add_handle(multi, s.easy);
      added += kClientThreads;
      ++started;
    }
    int queued = 0;
    while (CURLMsg* msg = curl_multi_info_read(multi, &queued)) {
      if (msg->msg != CURLMSG_DONE) continue;
      ++ended;
      HttpStream* s = nullptr;
      curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &s);
      long code = 0;
      curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &code);
      s->result->ok = msg->data.result == CURLE_OK && code == 200 && s->done_event;
      if (!s->result->ok) {
        s->result->error = absl::StrCat("curl ", curl_easy_strerror(msg->data.result), ", HTTP ",
                                        code, s->done_event ? "" : ", no [DONE]");
      }
    }
    if (added >= spec.streams && ended == started) break;
    // Wake for the next start at the latest; curl bounds each transfer by CURLOPT_TIMEOUT_MS
    // (through its timer).
    absl::Time latest = absl::Now() + absl::Milliseconds(100);
    if (added < spec.streams) latest = std::min(latest, start + spec.spread * added / spec.streams);
    loop.RunOnce(latest);
  }
  for (int i = part; i < spec.streams; i += kClientThreads) {
    HttpStream& s = streams[i];
    if (s.easy == nullptr) continue;
    curl_multi_remove_handle(multi, s.easy);
    curl_easy_cleanup(s.easy);
    curl_slist_free_all(s.headers);
  }
}

}  // namespace

std::vector<StreamResult> RunHttpStreams(const LoadSpec& spec) {
  std::vector<StreamResult> results(spec.streams);
  std::vector<HttpStream> streams(spec.streams);
  const absl::Time start = absl::Now();
  std::vector<std::thread> parts;
  for (int part = 0; part < kClientThreads; ++part) {
    parts.emplace_back([&, part] { RunPart(spec, part, start, results, streams); });
  }
  // Each part ends when its transfers did, each bounded by CURLOPT_TIMEOUT_MS.
  for (std::thread& t : parts) t.join();
  return results;
}

}  // namespace tandem::bench
