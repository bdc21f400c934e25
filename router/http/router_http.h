// The router's HTTP server (docs/router.md, "HTTP API"): the OpenAI-compatible endpoints
// POST /v1/chat/completions and /v1/completions (openai_generate.h), vLLM's POST /tokenize and
// /detokenize (openai_tokenize.h), GET /v1/models (with max_model_len), GET /health
// (200 only while at least one prefill and one decode node are healthy and the router is not
// draining; 503 otherwise) and GET /metrics (the router's Prometheus text), next to the gRPC
// server on the same RouterDeps. With deps->metrics set, every response is counted in
// tandem_http_requests_total{endpoint, status}, and every completion request refused before it
// runs (401, 413, a malformed body, an unknown model) in tandem_request_failure_total{code}.
//
// With deps->api_keys set, every endpoint but GET /health needs `Authorization: Bearer KEY`:
// without a valid key the answer is 401 with an OpenAI error object and nothing runs. Request
// bodies over the server's max_body_bytes get 413 with an OpenAI error object naming the limit;
// an unknown path 404 and a wrong method 405, both with an OpenAI error object too (every error
// object follows openai_response.h's rule: `code` is the HTTP status). Completion responses
// carry `system_fingerprint` (SystemFingerprint of the served model and TANDEM_VERSION). HTTPS
// when the options carry a certificate (docs/security.md).
//
// Shutdown lets requests in flight finish for `grace`, then cancels the rest (their node calls
// are cancelled and KV leases released) and stops the server once every handler returned.
//
// Thread-safety: port() from any thread; Shutdown from one thread. `deps` and whatever
// `render_metrics` reads must outlive the RouterHttp.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "router/generate_driver.h"
#include "router/http/openai_generate.h"
#include "serving/http_server.h"

namespace tandem {

class RouterHttp {
 public:
  // `listen` is "IP:PORT" (port 0 = any free port); `threads` bounds the requests answered at
  // once (a streaming response holds one until it ends). `render_metrics` returns the Prometheus
  // text of GET /metrics. Errors: those of HttpServer::Start.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<RouterHttp>> Start(
      const std::string& listen, int threads, const RouterDeps* deps,
      std::function<std::string()> render_metrics);
  // With every server option (body limit, HTTPS); its body_too_large is replaced by the OpenAI
  // error object.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<RouterHttp>> Start(
      const std::string& listen, HttpServerOptions options, const RouterDeps* deps,
      std::function<std::string()> render_metrics);

  ~RouterHttp();
  RouterHttp(const RouterHttp&) = delete;
  RouterHttp& operator=(const RouterHttp&) = delete;

  int port() const { return server_->port(); }
  void Shutdown(absl::Duration grace = absl::Seconds(5));

 private:
  RouterHttp() = default;
  void ServeHealth(HttpExchange& exchange) const;

  const RouterDeps* deps_ = nullptr;
  std::function<std::string()> render_metrics_;
  std::string system_fingerprint_;  // SystemFingerprint of the served model and this build
  ActiveRequests active_;
  std::unique_ptr<HttpServer> server_;
};

}  // namespace tandem
