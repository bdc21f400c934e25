// sse_server_tandem: the same SSE server as sse_server_httplib.cc, on Tandem's own HttpServer
// (serving/http_server.h: one libevent loop for every connection, each handler on a pool thread)
// -- the code path the router's streaming OpenAI API takes. Runs until SIGINT/SIGTERM.
#include <csignal>
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "serving/http_server.h"
#include "serving/server_runner.h"

ABSL_FLAG(int32_t, threads, 1100, "connection threads (one per concurrent connection)");
ABSL_FLAG(int32_t, tokens, 64, "events per stream before [DONE]");
ABSL_FLAG(int32_t, interval_ms, 20, "pause between two events");
ABSL_FLAG(std::string, port_file, "", "write the bound port here");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  tandem::InstallShutdownSignals();
  const int tokens = absl::GetFlag(FLAGS_tokens);
  const absl::Duration interval = absl::Milliseconds(absl::GetFlag(FLAGS_interval_ms));
  auto server = tandem::HttpServer::Start(
      "127.0.0.1:0", absl::GetFlag(FLAGS_threads),
      {{"GET", "/stream", [&](tandem::HttpExchange& ex) {
          if (!ex.StartStream(200, "text/event-stream", {{"Cache-Control", "no-cache"}})) return;
          for (int i = 0; i < tokens; ++i) {
            absl::SleepFor(interval);
            if (!ex.WriteChunk(absl::StrCat("data: {\"index\":", i, ",\"text\":\" token\"}\n\n"))) {
              return;
            }
          }
          ex.WriteChunk("data: [DONE]\n\n");
          ex.EndStream();
        }}});
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
    return 1;
  }
  if (const std::string file = absl::GetFlag(FLAGS_port_file); !file.empty()) {
    if (!tandem::WritePortFile(file, (*server)->port()).ok()) return 1;
  }
  tandem::WaitForShutdownSignal();
  (*server)->Stop();
  return 0;
}
