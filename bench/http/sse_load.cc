// sse_load: opens N concurrent HTTP connections to one server-sent-events endpoint at once and
// reads every stream to its `data: [DONE]` event, on one thread (poll). Prints how many streams
// completed, how many failed (connect error, non-200 status, EOF or timeout before [DONE]), the
// events received, the wall time and the largest gap between two events of one stream.
//
//   sse_load --port=P --connections=512 [--path=/stream] [--timeout_s=120]
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

ABSL_FLAG(int32_t, port, 0, "server port on 127.0.0.1");
ABSL_FLAG(int32_t, connections, 512, "concurrent streams");
ABSL_FLAG(std::string, path, "/stream", "request path");
ABSL_FLAG(int32_t, timeout_s, 120, "give up on streams not done after this long");

namespace {

struct Stream {
  int fd = -1;
  std::string request;
  size_t sent = 0;
  std::string buffer;  // bytes not yet split into events
  bool header_done = false;
  bool done = false;
  bool failed = false;
  std::string error;
  int events = 0;
  absl::Time last_event;
  absl::Duration max_gap;
};

void Fail(Stream& s, std::string error) {
  s.failed = true;
  s.error = std::move(error);
  if (s.fd >= 0) close(s.fd);
  s.fd = -1;
}

// Consumes complete lines of the response; marks the stream done at `data: [DONE]`.
void Parse(Stream& s) {
  if (!s.header_done) {
    const size_t end = s.buffer.find("\r\n\r\n");
    if (end == std::string::npos) return;
    if (s.buffer.compare(0, 12, "HTTP/1.1 200") != 0) {
      Fail(s, "status line: " + s.buffer.substr(0, s.buffer.find('\r')));
      return;
    }
    s.header_done = true;
    s.buffer.erase(0, end + 4);
  }
  size_t pos;
  while ((pos = s.buffer.find('\n')) != std::string::npos) {
    const std::string line = s.buffer.substr(0, pos);
    s.buffer.erase(0, pos + 1);
    if (line.rfind("data: ", 0) != 0) continue;  // chunk sizes, blank lines
    const absl::Time now = absl::Now();
    if (s.events > 0) s.max_gap = std::max(s.max_gap, now - s.last_event);
    s.last_event = now;
    ++s.events;
    if (line.rfind("data: [DONE]", 0) == 0) {
      s.done = true;
      close(s.fd);
      s.fd = -1;
      return;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int n = absl::GetFlag(FLAGS_connections);
  std::vector<Stream> streams(n);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(absl::GetFlag(FLAGS_port)));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const absl::Time start = absl::Now();
  for (Stream& s : streams) {
    s.request = absl::StrCat("GET ", absl::GetFlag(FLAGS_path),
                             " HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n"
                             "Connection: close\r\n\r\n");
    s.fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (s.fd < 0) {
      Fail(s, absl::StrCat("socket: errno ", errno));
      continue;
    }
    if (connect(s.fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 &&
        errno != EINPROGRESS) {
      Fail(s, absl::StrCat("connect: errno ", errno));
    }
  }
  const absl::Time deadline = start + absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  std::vector<pollfd> fds;
  std::vector<Stream*> owners;
  char buf[16384];
  while (absl::Now() < deadline) {
    fds.clear();
    owners.clear();
    for (Stream& s : streams) {
      if (s.fd < 0) continue;
      fds.push_back({s.fd, static_cast<short>(s.sent < s.request.size() ? POLLOUT : POLLIN), 0});
      owners.push_back(&s);
    }
    if (fds.empty()) break;
    if (poll(fds.data(), fds.size(), 100) < 0) break;
    for (size_t i = 0; i < fds.size(); ++i) {
      Stream& s = *owners[i];
      if (fds[i].revents == 0) continue;
      if (s.sent < s.request.size()) {
        const ssize_t w =
            send(s.fd, s.request.data() + s.sent, s.request.size() - s.sent, MSG_NOSIGNAL);
        if (w < 0) {
          if (errno != EAGAIN) Fail(s, absl::StrCat("send: errno ", errno));
          continue;
        }
        s.sent += static_cast<size_t>(w);
        continue;
      }
      const ssize_t r = recv(s.fd, buf, sizeof(buf), 0);
      if (r < 0) {
        if (errno != EAGAIN) Fail(s, absl::StrCat("recv: errno ", errno));
        continue;
      }
      if (r == 0) {
        Fail(s, absl::StrCat("EOF after ", s.events, " events"));
        continue;
      }
      s.buffer.append(buf, static_cast<size_t>(r));
      Parse(s);
    }
  }
  const absl::Duration wall = absl::Now() - start;
  int ok = 0, failed = 0;
  long events = 0;
  absl::Duration max_gap;
  std::string first_error;
  for (Stream& s : streams) {
    events += s.events;
    max_gap = std::max(max_gap, s.max_gap);
    if (s.done) {
      ++ok;
    } else {
      ++failed;
      if (first_error.empty()) first_error = s.failed ? s.error : "timeout";
      if (s.fd >= 0) close(s.fd);
    }
  }
  std::printf("RESULT streams_ok=%d\nRESULT streams_failed=%d\nRESULT events=%ld\n", ok, failed,
              events);
  std::printf("RESULT wall_s=%.2f\nRESULT max_event_gap_ms=%.1f\n", absl::ToDoubleSeconds(wall),
              absl::ToDoubleMilliseconds(max_gap));
  if (!first_error.empty()) std::printf("first failure: %s\n", first_error.c_str());
  return failed == 0 ? 0 : 1;
}
