// sse_server_civetweb: CivetWeb serving GET /stream — `tokens` server-sent events, one every
// `interval_ms`, then `data: [DONE]`; the same server as sse_server_httplib.cc on the other
// candidate library (bench/http/run.sh). Runs until killed.
#include <civetweb.h>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

ABSL_FLAG(int32_t, threads, 1100, "worker threads (one per concurrent connection)");
ABSL_FLAG(int32_t, tokens, 64, "events per stream before [DONE]");
ABSL_FLAG(int32_t, interval_ms, 20, "pause between two events");
ABSL_FLAG(std::string, port_file, "", "write the bound port here");

namespace {

int Stream(mg_connection* conn, void*) {
  static constexpr char kHeader[] =
      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
      "Connection: close\r\n\r\n";
  if (mg_write(conn, kHeader, sizeof(kHeader) - 1) <= 0) return 200;
  const int tokens = absl::GetFlag(FLAGS_tokens);
  const absl::Duration interval = absl::Milliseconds(absl::GetFlag(FLAGS_interval_ms));
  for (int i = 0; i < tokens; ++i) {
    absl::SleepFor(interval);
    const std::string event = absl::StrCat("data: {\"index\":", i, ",\"text\":\" token\"}\n\n");
    if (mg_write(conn, event.data(), event.size()) <= 0) return 200;
  }
  static constexpr char kDone[] = "data: [DONE]\n\n";
  mg_write(conn, kDone, sizeof(kDone) - 1);
  return 200;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  mg_init_library(0);
  const std::string threads = absl::StrCat(absl::GetFlag(FLAGS_threads));
  const char* options[] = {"listening_ports",   "127.0.0.1:0", "num_threads", threads.c_str(),
                           "enable_keep_alive", "no",          nullptr};
  mg_callbacks callbacks{};
  mg_context* ctx = mg_start(&callbacks, nullptr, options);
  if (ctx == nullptr) {
    std::fprintf(stderr, "cannot start civetweb\n");
    return 1;
  }
  mg_set_request_handler(ctx, "/stream", Stream, nullptr);
  mg_server_port ports[1];
  if (mg_get_server_ports(ctx, 1, ports) < 1) return 1;
  if (const std::string file = absl::GetFlag(FLAGS_port_file); !file.empty()) {
    std::ofstream(file) << ports[0].port << "\n";
  }
  int signal = 0;
  sigwait(&signals, &signal);
  mg_stop(ctx);
  return 0;
}
