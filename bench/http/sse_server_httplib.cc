// sse_server_httplib: cpp-httplib serving GET /stream — `tokens` server-sent events, one every
// `interval_ms` (a decode stream's pace), then `data: [DONE]`. The candidate-library half of
// bench/http/run.sh; sse_server_civetweb.cc is the same server on CivetWeb.
#include <httplib.h>
#include <sys/socket.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

ABSL_FLAG(int32_t, threads, 1100, "worker threads (one per concurrent connection)");
ABSL_FLAG(int32_t, tokens, 64, "events per stream before [DONE]");
ABSL_FLAG(int32_t, interval_ms, 20, "pause between two events");
ABSL_FLAG(int32_t, backlog, 0,
          "0: keep cpp-httplib 0.11's listen backlog (5); N: listen() again with backlog N");
ABSL_FLAG(std::string, port_file, "", "write the bound port here");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int threads = absl::GetFlag(FLAGS_threads);
  const int tokens = absl::GetFlag(FLAGS_tokens);
  const absl::Duration interval = absl::Milliseconds(absl::GetFlag(FLAGS_interval_ms));
  httplib::Server server;
  server.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server.Get("/stream", [&](const httplib::Request&, httplib::Response& res) {
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", [&](size_t, httplib::DataSink& sink) {
      for (int i = 0; i < tokens; ++i) {
        absl::SleepFor(interval);
        const std::string event = absl::StrCat("data: {\"index\":", i, ",\"text\":\" token\"}\n\n");
        if (!sink.write(event.data(), event.size())) return false;
      }
      static constexpr char kDone[] = "data: [DONE]\n\n";
      if (!sink.write(kDone, sizeof(kDone) - 1)) return false;
      sink.done();
      return true;
    });
  });
  // cpp-httplib 0.11 listens with a backlog of 5 and has no setting for it; the socket-options
  // hook sees the listening socket before bind, and Linux lets listen() raise the backlog later.
  int listen_fd = -1;
  server.set_socket_options([&listen_fd](int fd) {
    listen_fd = fd;
    httplib::default_socket_options(fd);
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  if (const int backlog = absl::GetFlag(FLAGS_backlog); backlog > 0 && port > 0) {
    if (::listen(listen_fd, backlog) != 0) {
      std::fprintf(stderr, "listen(backlog=%d) failed\n", backlog);
      return 1;
    }
  }
  if (port <= 0) {
    std::fprintf(stderr, "cannot bind\n");
    return 1;
  }
  if (const std::string file = absl::GetFlag(FLAGS_port_file); !file.empty()) {
    std::ofstream(file) << port << "\n";
  }
  server.listen_after_bind();
  return 0;
}
