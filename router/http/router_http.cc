#include "router/http/router_http.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "router/http/openai_response.h"

namespace tandem {

absl::StatusOr<std::unique_ptr<RouterHttp>> RouterHttp::Start(
    const std::string& listen, int threads, const RouterDeps* deps,
    std::function<std::string()> render_metrics) {
  std::unique_ptr<RouterHttp> http(new RouterHttp());
  http->deps_ = deps;
  http->render_metrics_ = std::move(render_metrics);
  RouterHttp* self = http.get();
  const int64_t started = absl::ToUnixSeconds(absl::Now());
  std::vector<HttpRoute> routes = {
      {"POST", "/v1/chat/completions",
       [self](HttpExchange& ex) {
         ServeCompletion(*self->deps_, OpenAiEndpoint::kChatCompletions, self->active_, ex);
       }},
      {"POST", "/v1/completions",
       [self](HttpExchange& ex) {
         ServeCompletion(*self->deps_, OpenAiEndpoint::kCompletions, self->active_, ex);
       }},
      {"GET", "/v1/models",
       [self, started](HttpExchange& ex) {
         ex.Respond(200, "application/json",
                    ModelsBody(self->deps_->model->limits().name, started));
       }},
      {"GET", "/health", [self](HttpExchange& ex) { self->ServeHealth(ex); }},
      {"GET", "/metrics",
       [self](HttpExchange& ex) {
         ex.Respond(200, "text/plain; version=0.0.4; charset=utf-8", self->render_metrics_());
       }},
  };
  absl::StatusOr<std::unique_ptr<HttpServer>> server =
      HttpServer::Start(listen, threads, std::move(routes));
  if (!server.ok()) return server.status();
  http->server_ = *std::move(server);
  return http;
}

void RouterHttp::ServeHealth(HttpExchange& exchange) const {
  const v1::ClusterStatusResponse fleet = deps_->pool->Snapshot(absl::Now());
  int prefill = 0, decode = 0;
  for (const v1::NodeStatus& node : fleet.nodes()) {
    if (!node.healthy()) continue;
    if (node.role() == v1::INSTANCE_ROLE_PREFILL) ++prefill;
    if (node.role() == v1::INSTANCE_ROLE_DECODE) ++decode;
  }
  const bool ok = prefill > 0 && decode > 0;
  exchange.Respond(
      ok ? 200 : 503, "application/json",
      absl::StrCat(R"({"status": ")", ok ? "ok" : "unavailable", R"(", "healthy_prefill_nodes": )",
                   prefill, R"(, "healthy_decode_nodes": )", decode, "}"));
}

void RouterHttp::Shutdown(absl::Duration grace) {
  if (server_ == nullptr) return;
  if (!active_.WaitEmpty(grace)) active_.CancelAll();
  active_.CancelAll();  // and any request that arrives from now on
  server_->Stop();
  server_.reset();
}

RouterHttp::~RouterHttp() { Shutdown(absl::ZeroDuration()); }

}  // namespace tandem
