#include "router/http/router_http.h"

#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "router/http/openai_response.h"
#include "router/http/openai_tokenize.h"

#ifndef TANDEM_VERSION
#error "TANDEM_VERSION is defined by router/http/CMakeLists.txt"
#endif

namespace tandem {
namespace {

constexpr char kJson[] = "application/json";

constexpr char kChatCompletions[] = "/v1/chat/completions";
constexpr char kCompletions[] = "/v1/completions";

bool IsCompletionRoute(const std::string& path) {
  return path == kChatCompletions || path == kCompletions;
}

// `route` behind the API keys (none configured: unchanged). The key itself is never logged or
// echoed. A refused completion request counts as a failed request (UNAUTHENTICATED), as a
// refused gRPC Generate does.
HttpHandler WithApiKey(const ApiKeys* keys, const RouterMetrics* metrics, bool completion,
                       HttpHandler route) {
  if (keys == nullptr) return route;
  return [keys, metrics, completion, route = std::move(route)](HttpExchange& ex) {
    const std::optional<std::string> authorization = ex.header("Authorization");
    if (!authorization.has_value() || !keys->Accepts(*authorization)) {
      if (completion && metrics != nullptr) metrics->RecordFailure("UNAUTHENTICATED");
      ex.Respond(401, kJson,
                 ErrorBody(401, authorization.has_value()
                                    ? "Incorrect API key provided."
                                    : "You didn't provide an API key. Send it in the "
                                      "'Authorization: Bearer KEY' header."),
                 {{"WWW-Authenticate", "Bearer"}});
      return;
    }
    route(ex);
  };
}

// POST /tokenize and /detokenize: `fn`'s answer, or its error as an OpenAI error object.
void ServeTokenizer(const RouterDeps& deps, const char* path, HttpExchange& ex,
                    absl::StatusOr<TokenizeAnswer> (*fn)(const ServedModel&, absl::string_view)) {
  absl::StatusOr<std::string> body = ex.ReadBody(HttpServer::kMaxBodyBytes);
  if (!body.ok()) {
    const int status = body.status().code() == absl::StatusCode::kResourceExhausted
                           ? 413
                           : HttpStatusFor(body.status().code());
    ex.Respond(status, kJson, ErrorBody(status, body.status().message()));
    return;
  }
  absl::StatusOr<TokenizeAnswer> answer = fn(*deps.model, *body);
  if (!answer.ok()) {
    ex.Respond(HttpStatusFor(answer.status().code()), kJson, ErrorBody(answer.status()));
    return;
  }
  LogUnknownFields(deps.log, path, answer->unknown_fields);
  ex.Respond(200, kJson, answer->body);
}

// SystemFingerprint of the served model and this build.
std::string Fingerprint(const ServedModel& model) {
  std::vector<std::string> vocabulary;
  const Tokenizer& tokenizer = model.tokenizer();
  vocabulary.reserve(static_cast<size_t>(tokenizer.vocab_size()));
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    const absl::StatusOr<absl::string_view> text = tokenizer.TokenText(id);
    vocabulary.emplace_back(text.ok() ? *text : absl::string_view());
  }
  return SystemFingerprint(TANDEM_VERSION, model.limits().name, model.limits().context_length,
                           vocabulary);
}

}  // namespace

absl::StatusOr<std::unique_ptr<RouterHttp>> RouterHttp::Start(
    const std::string& listen, int threads, const RouterDeps* deps,
    std::function<std::string()> render_metrics) {
  HttpServerOptions options;
  options.threads = threads;
  return Start(listen, std::move(options), deps, std::move(render_metrics));
}

absl::StatusOr<std::unique_ptr<RouterHttp>> RouterHttp::Start(
    const std::string& listen, HttpServerOptions options, const RouterDeps* deps,
    std::function<std::string()> render_metrics) {
  std::unique_ptr<RouterHttp> http(new RouterHttp());
  http->deps_ = deps;
  http->render_metrics_ = std::move(render_metrics);
  RouterHttp* self = http.get();
  const int64_t started = absl::ToUnixSeconds(absl::Now());
  http->system_fingerprint_ = Fingerprint(*deps->model);
  std::vector<HttpRoute> routes = {
      {"POST", kChatCompletions,
       [self](HttpExchange& ex) {
         ServeCompletion(*self->deps_, OpenAiEndpoint::kChatCompletions, self->active_, ex,
                         self->system_fingerprint_);
       }},
      {"POST", kCompletions,
       [self](HttpExchange& ex) {
         ServeCompletion(*self->deps_, OpenAiEndpoint::kCompletions, self->active_, ex,
                         self->system_fingerprint_);
       }},
      {"POST", "/tokenize",
       [self](HttpExchange& ex) { ServeTokenizer(*self->deps_, "/tokenize", ex, &Tokenize); }},
      {"POST", "/detokenize",
       [self](HttpExchange& ex) { ServeTokenizer(*self->deps_, "/detokenize", ex, &Detokenize); }},
      {"GET", "/v1/models",
       [self, started](HttpExchange& ex) {
         const ModelLimits& limits = self->deps_->model->limits();
         ex.Respond(200, "application/json",
                    ModelsBody(limits.name, started, limits.context_length));
       }},
      {"GET", "/health", [self](HttpExchange& ex) { self->ServeHealth(ex); }},
      {"GET", "/metrics",
       [self](HttpExchange& ex) {
         ex.Respond(200, "text/plain; version=0.0.4; charset=utf-8", self->render_metrics_());
       }},
  };
  // /health stays open (load balancers probe it; it tells only whether the fleet can serve).
  for (HttpRoute& route : routes) {
    if (route.path != "/health") {
      route.handler = WithApiKey(deps->api_keys, deps->metrics, IsCompletionRoute(route.path),
                                 std::move(route.handler));
    }
  }
  // Every answer is counted by endpoint and status; a completion request the server refuses
  // before any handler runs (413: body over the limit) also counts as a failed request, with the
  // code gRPC gives an oversized message (RESOURCE_EXHAUSTED). ServeCompletion counts the other
  // refusals (malformed body, unknown model) and RunGenerate what runs.
  if (const RouterMetrics* metrics = deps->metrics; metrics != nullptr) {
    options.on_response = [metrics](const std::string& route, int status) {
      metrics->RecordHttpResponse(route, status);
      if (status == 413 && IsCompletionRoute(route)) metrics->RecordFailure("RESOURCE_EXHAUSTED");
    };
  }
  options.body_too_large = [](size_t max) {
    return ErrorBody(413, absl::StrCat("request body exceeds the limit of ", max,
                                       " bytes (--http_max_body_mb)"));
  };
  options.body_too_large_content_type = kJson;
  options.error_body = [](int status, const std::string& message) {
    return ErrorBody(status, message);
  };
  options.error_content_type = kJson;
  absl::StatusOr<std::unique_ptr<HttpServer>> server =
      HttpServer::Start(listen, options, std::move(routes));
  if (!server.ok()) return server.status();
  http->server_ = *std::move(server);
  return http;
}

void RouterHttp::ServeHealth(HttpExchange& exchange) const {
  if (deps_->draining != nullptr && deps_->draining->load()) {
    // Shutting down: probes and load balancers take this router out before it stops.
    exchange.Respond(503, "application/json", R"({"status": "draining"})");
    return;
  }
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
