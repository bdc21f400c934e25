#include "serving/node_process.h"

#include <grpcpp/health_check_service_interface.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "attention/cpu/cpu_isa.h"
#include "common/prometheus_text.h"
#include "serving/advertise_address.h"
#include "serving/heartbeat.h"
#include "serving/http_server.h"
#include "serving/instance_flags.h"
#include "serving/server_runner.h"
#include "serving/tls_flags.h"

namespace tandem {
namespace {

// Two threads: a scrape is quick, and Prometheus scrapes one target at a time.
constexpr int kMetricsThreads = 2;

// The /metrics endpoint, or nullptr when disabled.
absl::StatusOr<std::unique_ptr<HttpServer>> StartMetricsServer(const NodeProcess& p) {
  const std::string listen = absl::GetFlag(FLAGS_metrics_listen);
  if (p.metrics == nullptr || listen.empty()) return nullptr;
  const MetricsRegistry* registry = p.metrics;
  std::vector<HttpRoute> routes;
  routes.push_back(HttpRoute{"GET", "/metrics", [registry](HttpExchange& ex) {
                               ex.Respond(200, kPrometheusTextContentType,
                                          RenderPrometheusText(*registry));
                             }});
  absl::StatusOr<std::unique_ptr<HttpServer>> http =
      HttpServer::Start(listen, kMetricsThreads, std::move(routes));
  if (!http.ok()) {
    return absl::Status(http.status().code(),
                        absl::StrCat("--metrics_listen=", listen, ": ", http.status().message()));
  }
  if (const std::string file = absl::GetFlag(FLAGS_metrics_port_file); !file.empty()) {
    if (absl::Status s = WritePortFile(file, (*http)->port()); !s.ok()) return s;
  }
  std::fprintf(stderr, "%s: metrics at http://%s/metrics\n", p.program.c_str(),
               WithPort(listen, (*http)->port()).c_str());
  return http;
}

}  // namespace

absl::StatusOr<TlsConfig> NodeTlsFromFlags() {
  return LoadTlsConfig(TlsFilesFromFlags(), TlsRole::kServer);
}

int RunNodeProcess(const NodeProcess& p) {
  auto fail = [&](const absl::Status& s) {
    std::fprintf(stderr, "%s: %s\n", p.program.c_str(), s.ToString().c_str());
    return 1;
  };
  GrpcServerSettings settings;
  settings.credentials = GrpcServerCredentials(p.tls, ClientCertPolicy::kRequire);
  settings.max_concurrent_streams = absl::GetFlag(FLAGS_max_concurrent_streams);
  absl::StatusOr<RunningServer> server =
      StartGrpcServer(absl::GetFlag(FLAGS_listen), {p.service}, settings);
  if (!server.ok()) return fail(server.status());
  absl::StatusOr<std::unique_ptr<HttpServer>> metrics_server = StartMetricsServer(p);
  if (!metrics_server.ok()) return fail(metrics_server.status());
  grpc::HealthCheckServiceInterface* health = server->server->GetHealthCheckService();
  if (health != nullptr) health->SetServingStatus(false);
  const absl::StatusOr<std::string> advertised =
      AdvertisedAddress(absl::GetFlag(FLAGS_listen), server->port, absl::GetFlag(FLAGS_advertise));
  if (!advertised.ok()) return fail(advertised.status());
  const std::string& advertise = *advertised;
  // The shutdown signals are blocked (InstallShutdownSignals) and taken by this watcher from
  // here on: one that arrives while the model loads — which can take minutes for a large model —
  // ends the process at once (nothing is served or leased yet), instead of waiting for the load.
  absl::Mutex start_mu;
  bool started = false;
  std::promise<int> signal_seen;
  std::future<int> signal_future = signal_seen.get_future();
  std::thread watcher([&] {
    const int sig = WaitForShutdownSignal();
    absl::MutexLock lock(&start_mu);
    if (!started) {
      std::fprintf(stderr, "%s: signal %d while starting (before serving anything), exiting\n",
                   p.program.c_str(), sig);
      std::fflush(stderr);
      std::_Exit(0);
    }
    signal_seen.set_value(sig);
  });
  absl::StatusOr<std::string> serving = p.start(advertise);
  // From here a start-up failure leaves the watcher waiting for a signal: exit without
  // unwinding it (nothing has been served).
  auto fail_now = [&](const absl::Status& s) {
    const int rc = fail(s);
    std::fflush(stderr);
    std::_Exit(rc);
  };
  if (!serving.ok()) fail_now(serving.status());
  {
    absl::MutexLock lock(&start_mu);
    started = true;
  }
  if (health != nullptr) health->SetServingStatus(true);
  if (!absl::GetFlag(FLAGS_port_file).empty()) {
    if (absl::Status s = WritePortFile(absl::GetFlag(FLAGS_port_file), server->port); !s.ok()) {
      fail_now(s);
    }
  }
  std::unique_ptr<HeartbeatSender> heartbeat;
  if (!absl::GetFlag(FLAGS_router).empty()) {
    heartbeat = std::make_unique<HeartbeatSender>(absl::GetFlag(FLAGS_router), advertise, p.role,
                                                  absl::Seconds(3), GrpcChannelCredentials(p.tls));
  }
  // The CPU kernels' instruction-set path (forced ones say so): figures depend on it.
  std::fprintf(stderr, "%s: cpu kernels: %s\n", p.program.c_str(), DescribeCpuIsa().c_str());
  std::fprintf(stderr, "%s: %s%s\n", p.program.c_str(), serving->c_str(),
               !p.tls.enabled()         ? ""
               : p.tls.verifies_peers() ? " [gRPC: TLS, client certificates required]"
                                        : " [gRPC: TLS]");
  const int sig = signal_future.get();
  watcher.join();
  const absl::Duration drain_timeout = absl::Seconds(absl::GetFlag(FLAGS_drain_timeout_s));
  const absl::Time deadline = absl::Now() + drain_timeout;
  std::fprintf(stderr, "%s: signal %d, draining (at most %s)\n", p.program.c_str(), sig,
               absl::FormatDuration(drain_timeout).c_str());
  if (health != nullptr) health->SetServingStatus(false);
  if (p.start_drain) p.start_drain();
  heartbeat.reset();
  const absl::Time drain_start = absl::Now();
  const bool drained = !p.wait_drained || p.wait_drained(deadline);
  if (drained) {
    std::fprintf(stderr, "%s: drained in %s, shutting down\n", p.program.c_str(),
                 absl::FormatDuration(absl::Now() - drain_start).c_str());
  } else {
    std::fprintf(stderr, "%s: drain timed out after %s, cancelling what is left\n",
                 p.program.c_str(), absl::FormatDuration(drain_timeout).c_str());
  }
  // Calls still running (a unary call that just arrived, the last bytes of a finished stream)
  // get what is left of the drain timeout, then gRPC cancels them.
  server->server->Shutdown(absl::ToChronoTime(std::max(deadline, absl::Now())));
  server->server->Wait();
  if (*metrics_server != nullptr) (*metrics_server)->Stop();
  p.stop();
  return 0;
}

}  // namespace tandem
