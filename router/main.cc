// tandem-router: parses flags, loads the model's tokenizer and metadata, starts the router and
// waits for SIGINT/SIGTERM. Every flag may also come from a file: --flagfile=router.flags
// (one --name=value per line). See docs/router.md.
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/flag_dashes.h"
#include "common/prometheus_text.h"
#include "router/http/router_http.h"
#include "router/router_log.h"
#include "router/router_options.h"
#include "router/router_server.h"
#include "router/served_model.h"
#include "serving/api_keys.h"
#include "serving/served_model_name.h"
#include "serving/server_runner.h"
#include "serving/tls_flags.h"

ABSL_FLAG(std::string, listen, "0.0.0.0:50050", "gRPC listen address host:port (port 0 = any)");
ABSL_FLAG(std::string, model, "",
          "GGUF model file or HF checkpoint directory (only tokenizer and metadata are read)");
ABSL_FLAG(std::string, served_model_name, "",
          "name the model is served as: listed by /v1/models, required as a request's model, and "
          "expected from the nodes (default: the model file's name without .gguf, or the HF "
          "directory's name; spaces become '-')");
ABSL_FLAG(std::string, model_name, "", "deprecated alias of --served_model_name");
ABSL_FLAG(std::string, chat_template, "",
          "Jinja chat template file rendering chat requests, replacing the model's own "
          "(default: the model's chat template; ChatML when it has none)");
ABSL_FLAG(std::string, prefill, "", "static prefill nodes, comma-separated host:port");
ABSL_FLAG(std::string, decode, "", "static decode nodes, comma-separated host:port");
ABSL_FLAG(std::string, prefill_policy, "kv_aware",
          "round_robin | least_loaded | kv_aware (least prefill work given the nodes' prefix "
          "caches; least_loaded while no node publishes one)");
ABSL_FLAG(std::string, decode_policy, "least_loaded", "round_robin | least_loaded");
ABSL_FLAG(int32_t, health_interval_ms, 1000, "period of node Status polls");
ABSL_FLAG(int32_t, rpc_timeout_ms, 60000, "deadline of each unary call to a node");
ABSL_FLAG(int32_t, decode_idle_timeout_ms, 30000, "max gap between two decode stream events");
ABSL_FLAG(bool, pipelined_transfer, false,
          "pipelined KV transfer: send each request's Decode call as soon as its prefill node has "
          "the prompt's KV blocks, so the decode node pulls the KV chunk by chunk "
          "(--max_prefill_tokens) while the prefill runs (docs/kv_transfer.md)");
ABSL_FLAG(bool, colocated, false,
          "colocated serving: send each request to a decode node started with "
          "--colocated_prefill=true, which prefills and decodes it (no --prefill nodes)");
ABSL_FLAG(int32_t, max_attempts, 3, "retryable node failures one request may take");
ABSL_FLAG(bool, strict, false,
          "strict mode for every request: fail it (ABORTED / HTTP 503) instead of prefilling "
          "again after a failed KV transfer or resuming on another decode node "
          "(docs/router.md#provenance-and-strict-mode)");
ABSL_FLAG(int32_t, unhealthy_wait_ms, 60000,
          "longest a request waits for a healthy node of a role before failing UNAVAILABLE "
          "(bounded by the client deadline too); 0 fails at once");
ABSL_FLAG(std::string, port_file, "", "write the bound port to this file once serving");
ABSL_FLAG(std::string, http_listen, "127.0.0.1:0",
          "OpenAI-compatible HTTP API address HOST:PORT (port 0 = any; empty = no HTTP API)");
ABSL_FLAG(std::string, http_port_file, "", "write the bound HTTP port to this file once serving");
ABSL_FLAG(int32_t, drain_timeout_s, 30,
          "on SIGTERM: seconds requests in flight may take to finish before they are cancelled");
ABSL_FLAG(int32_t, http_threads, 1024,
          "HTTP handler threads: the most HTTP requests answered at once (a stream holds one "
          "until it ends; more wait for a thread, connected)");
ABSL_FLAG(std::string, api_keys_file, "",
          "file of API keys, one per line (# comments): Generate, ClusterStatus and every HTTP "
          "endpoint but /health then need 'Authorization: Bearer KEY'; empty = no keys");
ABSL_FLAG(int32_t, max_requests_in_flight, 4096,
          "requests (gRPC + HTTP) running at once; more are refused with RESOURCE_EXHAUSTED / "
          "HTTP 429; 0 = no limit");
ABSL_FLAG(int32_t, max_concurrent_streams, 1024,
          "gRPC calls one client connection may have open at once (more wait in the client); 0 = "
          "gRPC default");
ABSL_FLAG(int32_t, http_max_body_mb, 8,
          "largest HTTP request body, MiB (1-32); larger ones get 413 before they are read");

namespace {

absl::StatusOr<tandem::RouterOptions> OptionsFromFlags() {
  tandem::RouterOptions o;
  o.listen = absl::GetFlag(FLAGS_listen);
  auto prefill = tandem::ParseAddressList(absl::GetFlag(FLAGS_prefill));
  if (!prefill.ok()) return prefill.status();
  o.prefill_nodes = *std::move(prefill);
  auto decode = tandem::ParseAddressList(absl::GetFlag(FLAGS_decode));
  if (!decode.ok()) return decode.status();
  o.decode_nodes = *std::move(decode);
  auto prefill_policy = tandem::ParsePolicyKind(absl::GetFlag(FLAGS_prefill_policy));
  if (!prefill_policy.ok()) return prefill_policy.status();
  o.prefill_policy = *prefill_policy;
  auto decode_policy = tandem::ParsePolicyKind(absl::GetFlag(FLAGS_decode_policy));
  if (!decode_policy.ok()) return decode_policy.status();
  o.decode_policy = *decode_policy;
  o.health_interval = absl::Milliseconds(absl::GetFlag(FLAGS_health_interval_ms));
  o.rpc_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_rpc_timeout_ms));
  o.decode_idle_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_decode_idle_timeout_ms));
  o.max_attempts = absl::GetFlag(FLAGS_max_attempts);
  o.colocated = absl::GetFlag(FLAGS_colocated);
  o.pipelined_transfer = absl::GetFlag(FLAGS_pipelined_transfer);
  o.strict = absl::GetFlag(FLAGS_strict);
  if (absl::GetFlag(FLAGS_unhealthy_wait_ms) < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--unhealthy_wait_ms must be >= 0, got ",
                                                   absl::GetFlag(FLAGS_unhealthy_wait_ms)));
  }
  o.retry.wait_budget = absl::Milliseconds(absl::GetFlag(FLAGS_unhealthy_wait_ms));
  return o;
}

// TLS, API keys and limits from the flags; every file is read and checked here, at start-up.
absl::StatusOr<tandem::RouterAccess> AccessFromFlags() {
  tandem::RouterAccess access;
  absl::StatusOr<tandem::TlsConfig> tls =
      tandem::LoadTlsConfig(tandem::TlsFilesFromFlags(), tandem::TlsRole::kServer);
  if (!tls.ok()) return tls.status();
  access.tls = *std::move(tls);
  if (const std::string file = absl::GetFlag(FLAGS_api_keys_file); !file.empty()) {
    absl::StatusOr<tandem::ApiKeys> keys = tandem::ApiKeys::Load(file);
    if (!keys.ok()) return keys.status();
    access.api_keys = std::make_shared<const tandem::ApiKeys>(*std::move(keys));
  }
  for (const auto& [name, value] :
       {std::pair{"--max_requests_in_flight", absl::GetFlag(FLAGS_max_requests_in_flight)},
        std::pair{"--max_concurrent_streams", absl::GetFlag(FLAGS_max_concurrent_streams)}}) {
    if (value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " must be >= 0 (0 = no limit), got ", value));
    }
  }
  access.max_requests_in_flight = absl::GetFlag(FLAGS_max_requests_in_flight);
  access.max_concurrent_streams = absl::GetFlag(FLAGS_max_concurrent_streams);
  return access;
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "tandem-router: %s\n", status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "tandem-router --model=M.gguf|HF_DIR --prefill=HOST:PORT,... --decode=HOST:PORT,... "
      "[--listen=HOST:PORT] [--http_listen=HOST:PORT] [--flagfile=FILE]");
  tandem::NormalizeFlagDashes(argc, argv);
  absl::ParseCommandLine(argc, argv);
  // Debian's abseil is built without NDEBUG, so every Mutex::Lock would also record the lock in
  // abseil's process-wide deadlock graph under one global lock, which serialises every thread's
  // locking (its graph lookups alone were 6 % of the router's CPU at 2,000 gRPC streams in the
  // capacity bench, bench/router/). Tests keep the check.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // Block the shutdown signals before any thread starts, so they are only taken by sigwait.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  const absl::StatusOr<tandem::RouterOptions> options = OptionsFromFlags();
  if (!options.ok()) return Fail(options.status());
  if (absl::GetFlag(FLAGS_model).empty())
    return Fail(absl::InvalidArgumentError("--model is required"));
  const absl::StatusOr<std::string> served_name =
      tandem::ResolveServedModelName(absl::GetFlag(FLAGS_served_model_name),
                                     absl::GetFlag(FLAGS_model_name), absl::GetFlag(FLAGS_model));
  if (!served_name.ok()) return Fail(served_name.status());
  if (!absl::GetFlag(FLAGS_model_name).empty()) {
    tandem::LogToStderr("--model_name is deprecated; use --served_model_name");
  }
  auto model = tandem::ServedModel::Load(absl::GetFlag(FLAGS_model), *served_name,
                                         absl::GetFlag(FLAGS_chat_template));
  if (!model.ok()) return Fail(model.status());
  tandem::LogToStderr((*model)->chat().Describe());
  absl::StatusOr<tandem::RouterAccess> access = AccessFromFlags();
  if (!access.ok()) return Fail(access.status());
  const int32_t max_body_mb = absl::GetFlag(FLAGS_http_max_body_mb);
  if (max_body_mb < 1 || max_body_mb > 32) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--http_max_body_mb must be in [1, 32], got ", max_body_mb)));
  }
  const tandem::TlsConfig tls = access->tls;
  const bool keys = access->api_keys != nullptr;
  auto router = tandem::RouterServer::Start(*options, *std::move(model), tandem::LogToStderr,
                                            *std::move(access));
  if (!router.ok()) return Fail(router.status());
  // The HTTP API is up before the gRPC port file appears: that file means "ready".
  std::unique_ptr<tandem::RouterHttp> http;
  if (const std::string http_listen = absl::GetFlag(FLAGS_http_listen); !http_listen.empty()) {
    const tandem::RouterServer* server = router->get();
    tandem::HttpServerOptions http_options;
    http_options.threads = absl::GetFlag(FLAGS_http_threads);
    http_options.max_body_bytes = static_cast<size_t>(max_body_mb) << 20;
    http_options.tls_cert_file = tls.files.cert;
    http_options.tls_key_file = tls.files.key;
    auto started = tandem::RouterHttp::Start(
        http_listen, std::move(http_options), &server->deps(),
        [server] { return tandem::RenderPrometheusText(server->metrics()); });
    if (!started.ok()) return Fail(started.status());
    http = *std::move(started);
    std::fprintf(stderr, "tandem-router: OpenAI API at %s://%s/v1\n", tandem::HttpScheme(tls),
                 tandem::WithPort(http_listen, http->port()).c_str());
    if (const std::string file = absl::GetFlag(FLAGS_http_port_file); !file.empty()) {
      if (absl::Status s = tandem::WritePortFile(file, http->port()); !s.ok()) return Fail(s);
    }
  }
  std::fprintf(
      stderr, "tandem-router: gRPC %s%s, API keys %s\n", tls.enabled() ? "TLS" : "plaintext",
      tls.verifies_peers() ? " (client certificates verified, required for Heartbeat)" : "",
      keys ? "required" : "not required");
  if (const std::string port_file = absl::GetFlag(FLAGS_port_file); !port_file.empty()) {
    if (absl::Status s = tandem::WritePortFile(port_file, (*router)->port()); !s.ok()) {
      return Fail(s);
    }
  }
  int signal = 0;
  sigwait(&signals, &signal);
  const absl::Duration drain = absl::Seconds(absl::GetFlag(FLAGS_drain_timeout_s));
  std::fprintf(stderr, "tandem-router: signal %d, draining (at most %s)\n", signal,
               absl::FormatDuration(drain).c_str());
  // Both APIs drain at once: gRPC refuses new calls at once, requests in flight on either get
  // `drain` to finish. The node pool outlives both (it is the RouterServer's).
  std::thread http_drain([&http, drain] {
    if (http != nullptr) http->Shutdown(drain);
  });
  (*router)->Shutdown(drain);
  http_drain.join();
  std::fprintf(stderr, "tandem-router: drained, exiting\n");
  return 0;
}
