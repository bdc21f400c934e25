#include "router/http/openai_generate.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "router/http/openai_choices.h"
#include "router/http/openai_logprobs.h"
#include "router/http/openai_prepare.h"
#include "router/http/openai_response.h"
#include "router/http/openai_tandem.h"
#include "router/http/openai_tools.h"
#include "router/http/stop_matcher.h"
#include "router/request_validation.h"
#include "serving/grpc_status.h"

namespace tandem {
namespace {

constexpr size_t kMaxBodyBytes = 32u << 20;
constexpr char kJson[] = "application/json";

// Writes the response as RunGenerate delivers tokens: on this thread, or on gRPC's while this
// thread waits in RunGenerate (decode_call.h), one event at a time either way.
class OpenAiSink : public GenerateSink {
 public:
  OpenAiSink(HttpExchange& exchange, const OpenAiRequest& request, CompletionMeta meta,
             HttpExchange::Headers headers, CancellationToken& cancel, const Tokenizer& tokenizer)
      : exchange_(exchange),
        request_(request),
        meta_(std::move(meta)),
        headers_(std::move(headers)),
        cancel_(cancel),
        stop_(request.stop, request.include_stop_str_in_output),
        tools_(request.tools.has_value() && request.tools->choice != OpenAiTools::Choice::kNone) {
    if (request.sampling.logprobs >= 0) logprobs_.emplace(request.endpoint, tokenizer);
  }

  void Prefilled(int32_t cached_tokens) override { cached_tokens_ = cached_tokens; }
  void OnProvenance(const Provenance& provenance) override {
    provenance_ = ProvenanceJson(provenance);
  }

  void OnToken(GeneratedToken token) override {
    // Tokens that arrive after a stop string matched (before the cancel reaches the decode node)
    // are neither sent nor counted: the usage counts what the client was given, up to the stop.
    if (stop_.stopped()) return;
    ++tokens_;
    if (logprobs_.has_value()) {
      logprobs_->Add(token.id, token.logprobs.value_or(TokenLogprobs{}), token.text);
    }
    // vLLM: stop strings are matched once min_tokens tokens were generated.
    Emit(stop_.Push(token.text, tokens_ > request_.sampling.min_tokens));
    if (stop_.stopped()) {
      // The rest of the generation is not wanted: end the request now.
      cancel_.Cancel();
    }
  }

  void OnDone(GenerateDone done) override {
    if (stop_.stopped()) return;
    cached_tokens_ = done.cached_tokens;
    Emit(stop_.Push(done.text_tail, tokens_ > request_.sampling.min_tokens));
    if (!stop_.stopped()) Emit(stop_.Flush());
    final_ = std::move(done);
  }

  // After RunGenerate returned `status`: writes the end of the response.
  void Finish(const absl::Status& status, int32_t prompt_tokens) {
    if (client_gone_) return;
    CompletionUsage usage{prompt_tokens, tokens_, cached_tokens_};
    std::string finish_reason;
    if (stop_.stopped()) {
      finish_reason = "stop";
    } else if (!status.ok()) {
      Fail(status);
      return;
    } else {
      finish_reason = final_.has_value() ? final_->finish_reason : "length";
      if (final_.has_value()) {
        usage = {final_->prompt_tokens, final_->completion_tokens, final_->cached_tokens};
      }
    }
    if (!request_.stream) {
      std::string body = CompletionBody(meta_, text_, finish_reason, usage, TakeLogprobs());
      if (tools_)
        body = WithToolCalls(std::move(body), ParseToolCalls(text_, request_.tool_format));
      if (request_.tandem.provenance) body = WithTandemObject(body, provenance_);
      exchange_.Respond(200, kJson, body, Headers());
      return;
    }
    StartStream();
    if (tools_ && !held_.empty()) {
      // The text from where a tool call began: its calls as tool_calls deltas, or text.
      const ParsedToolOutput parsed = ParseToolCalls(held_, request_.tool_format);
      if (parsed.calls.empty()) {
        Write(SseEvent(ChunkBody(meta_, held_, false, "", request_.include_usage)));
      } else {
        if (!parsed.content.empty()) {
          Write(SseEvent(ChunkBody(meta_, parsed.content, false, "", request_.include_usage)));
        }
        for (const nlohmann::json& delta : ToolCallDeltas(parsed.calls, meta_.id)) {
          nlohmann::json chunk =
              nlohmann::json::parse(ChunkBody(meta_, "", false, "", request_.include_usage));
          chunk["choices"][0]["delta"] = {{"tool_calls", nlohmann::json::array({delta})}};
          Write(SseEvent(chunk.dump()));
        }
        if (finish_reason == "stop") finish_reason = "tool_calls";
      }
    }
    if (logprobs_.has_value() && logprobs_->pending()) {  // tokens whose text was held back
      Write(SseEvent(ChunkBody(meta_, "", false, "", request_.include_usage, TakeLogprobs())));
    }
    // The last chunk before [DONE] carries the final provenance when the request asked for it.
    std::string last = ChunkBody(meta_, "", false, finish_reason, request_.include_usage);
    if (request_.include_usage) {
      Write(SseEvent(last));
      last = UsageChunkBody(meta_, usage);
    }
    if (request_.tandem.provenance) last = WithTandemObject(last, provenance_);
    Write(SseEvent(last));
    Write(kSseDone);
    if (!client_gone_) exchange_.EndStream();
  }

  bool client_gone() const { return client_gone_; }

 private:
  void Emit(const std::string& text) {
    if (!request_.stream) {
      text_ += text;
      return;
    }
    StartStream();
    if (tools_) {
      // Text from where a tool call may begin is held back until the end (Finish).
      held_ += text;
      const size_t start = ToolCallStart(held_, request_.tool_format);
      const std::string now = held_.substr(0, start);
      held_.erase(0, start);
      if (!now.empty()) {
        Write(SseEvent(ChunkBody(meta_, now, false, "", request_.include_usage, TakeLogprobs())));
      }
      return;
    }
    if (!text.empty()) {
      Write(SseEvent(ChunkBody(meta_, text, false, "", request_.include_usage, TakeLogprobs())));
    }
  }

  // A whole chat response with the calls found in its text: message.tool_calls, the content
  // outside them (null when none), finish_reason "tool_calls" (for "stop").
  std::string WithToolCalls(std::string body, const ParsedToolOutput& parsed) const {
    if (parsed.calls.empty()) return body;
    nlohmann::json j = nlohmann::json::parse(body);
    nlohmann::json& choice = j["choices"][0];
    choice["message"]["content"] =
        parsed.content.empty() ? nlohmann::json(nullptr) : nlohmann::json(parsed.content);
    choice["message"]["tool_calls"] = ToolCallsJson(parsed.calls, meta_.id);
    if (choice["finish_reason"] == "stop") choice["finish_reason"] = "tool_calls";
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }

  // The logprobs object of the tokens not sent yet (serialized); empty without logprobs.
  std::string TakeLogprobs() {
    if (!logprobs_.has_value()) return std::string();
    return logprobs_->Take().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }

  // Headers and, for chat, the role chunk: sent with the first token, so that an error before
  // it still gets a proper HTTP status.
  void StartStream() {
    if (started_) return;
    started_ = true;
    HttpExchange::Headers headers = Headers();  // the provenance as known at the first byte
    headers.emplace_back("Cache-Control", "no-cache");
    if (!exchange_.StartStream(200, "text/event-stream", headers)) {
      Gone();
      return;
    }
    if (meta_.endpoint == OpenAiEndpoint::kChatCompletions) {
      Write(SseEvent(ChunkBody(meta_, "", /*role=*/true, "", request_.include_usage)));
    }
  }

  // The response's headers: x-request-id and x-tandem-provenance (the provenance known now).
  HttpExchange::Headers Headers() const {
    HttpExchange::Headers headers = headers_;
    if (!provenance_.empty()) headers.emplace_back("x-tandem-provenance", provenance_);
    return headers;
  }

  void Write(absl::string_view data) {
    if (client_gone_) return;
    if (!exchange_.WriteChunk(data)) Gone();
  }

  void Gone() {
    client_gone_ = true;
    cancel_.Cancel();
  }

  void Fail(const absl::Status& status) {
    if (!started_) {
      exchange_.Respond(HttpStatusFor(status.code()), kJson, ErrorBody(status), Headers());
      return;
    }
    Write(SseEvent(ErrorBody(status)));
    Write(kSseDone);
    if (!client_gone_) exchange_.EndStream();
  }

  HttpExchange& exchange_;
  const OpenAiRequest& request_;
  const CompletionMeta meta_;
  const HttpExchange::Headers headers_;
  CancellationToken& cancel_;
  StopMatcher stop_;
  std::optional<LogprobsBuilder> logprobs_;  // with request.sampling.logprobs >= 0
  std::optional<GenerateDone> final_;
  std::string text_;  // non-streaming: the whole answer
  int32_t tokens_ = 0;
  int32_t cached_tokens_ = 0;  // Prefilled's (a request ended by a stop string has no final)
  std::string provenance_;     // ProvenanceJson of the latest OnProvenance
  bool started_ = false;
  bool client_gone_ = false;
  // Tools offered (tool_choice not "none"): the output is parsed for calls (openai_tools.h), in
  // the format the model was shown (request.tool_format, ApplyTools in openai_prepare.cc).
  const bool tools_;
  std::string held_;  // streaming with tools_: text from where a call may begin
};

bool PlausibleId(const std::string& id) {
  if (id.empty() || id.size() > 128) return false;
  return std::all_of(id.begin(), id.end(), [](char c) { return c > ' ' && c < 127; });
}

// The unknown field names logged so far by this process.
absl::Mutex unknown_mu(absl::kConstInit);
absl::flat_hash_set<std::string>* LoggedUnknownFields() ABSL_EXCLUSIVE_LOCKS_REQUIRED(unknown_mu) {
  static auto* const logged = new absl::flat_hash_set<std::string>();
  return logged;
}

}  // namespace

void ActiveRequests::Add(CancellationToken* c) {
  absl::MutexLock lock(&mu_);
  active_.insert(c);
  if (cancelled_) c->Cancel();
}

void ActiveRequests::Remove(CancellationToken* c) {
  absl::MutexLock lock(&mu_);
  active_.erase(c);
}

void ActiveRequests::CancelAll() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  for (CancellationToken* c : active_) c->Cancel();
}

bool ActiveRequests::WaitEmpty(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto empty = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return active_.empty(); };
  return mu_.AwaitWithTimeout(absl::Condition(&empty), timeout);
}

void LogUnknownFields(const LogFn& log, absl::string_view endpoint_path,
                      const std::vector<std::string>& fields) {
  if (!log) return;
  // A client could send endless new names: the set (and the log) stop growing at this many.
  constexpr size_t kMaxLogged = 1024;
  for (const std::string& field : fields) {
    {
      absl::MutexLock lock(&unknown_mu);
      absl::flat_hash_set<std::string>& logged = *LoggedUnknownFields();
      if (logged.size() >= kMaxLogged || !logged.insert(field).second) continue;
    }
    // The name is the client's: printable ASCII only, at most 64 characters, in the log line.
    std::string shown = field.substr(0, 64);
    for (char& c : shown) {
      if (c <= ' ' || c >= 127) c = '?';
    }
    log(absl::StrCat("openai_unknown_field field=", shown, " endpoint=", endpoint_path,
                     " action=ignored (logged once per field name)"));
  }
}

std::string HttpRequestId(const RouterDeps& deps, const HttpExchange& exchange) {
  if (std::optional<std::string> id = exchange.header("x-request-id");
      id.has_value() && PlausibleId(*id)) {
    return *id;
  }
  return absl::StrCat("req-", absl::Hex(absl::ToUnixMicros(absl::Now())), "-",
                      deps.request_counter->fetch_add(1));
}

void ServeCompletion(const RouterDeps& deps, OpenAiEndpoint endpoint, ActiveRequests& active,
                     HttpExchange& exchange, const std::string& system_fingerprint) {
  std::string request_id = HttpRequestId(deps, exchange);
  HttpExchange::Headers headers = {{"x-request-id", request_id}};
  // Refused before RunGenerate (which counts what it runs): counted here, but a 413 is counted
  // by RouterHttp with every 413 (most come from the server, before this handler runs).
  auto fail = [&](const absl::Status& status, int http_status) {
    if (deps.metrics != nullptr && http_status != 413) {
      deps.metrics->RecordFailure(absl::StatusCodeToString(status.code()));
    }
    exchange.Respond(http_status, kJson,
                     http_status == HttpStatusFor(status.code())
                         ? ErrorBody(status)
                         : ErrorBody(http_status, status.message()),
                     headers);
  };
  absl::StatusOr<std::string> body = exchange.ReadBody(kMaxBodyBytes);
  if (!body.ok()) {
    fail(body.status(), body.status().code() == absl::StatusCode::kResourceExhausted
                            ? 413
                            : HttpStatusFor(body.status().code()));
    return;
  }
  absl::StatusOr<PreparedOpenAiRequest> prepared =
      PrepareOpenAiRequest(*deps.model, endpoint, *body, request_id);
  if (!prepared.ok()) {
    fail(prepared.status(), HttpStatusFor(prepared.status().code()));
    return;
  }
  const OpenAiRequest& request = prepared->request;
  const ModelLimits& limits = deps.model->limits();
  LogUnknownFields(
      deps.log,
      endpoint == OpenAiEndpoint::kChatCompletions ? "/v1/chat/completions" : "/v1/completions",
      request.unknown_fields);
  // The body's request_id (vLLM), unless the x-request-id header gave one (vLLM's precedence).
  if (request.request_id.has_value()) {
    if (!PlausibleId(*request.request_id)) {
      fail(OpenAiInvalidParam("request_id",
                              "'request_id' must be 1-128 printable ASCII characters without "
                              "spaces"),
           400);
      return;
    }
    const std::optional<std::string> header = exchange.header("x-request-id");
    if (!header.has_value() || !PlausibleId(*header)) {
      request_id = *request.request_id;
      headers = {{"x-request-id", request_id}};
      prepared->generate.request_id = request_id;
    }
  }

  CompletionMeta meta{endpoint, CompletionId(endpoint, request_id),
                      absl::ToUnixSeconds(absl::Now()), limits.name, system_fingerprint};
  CancellationToken cancel;
  active.Add(&cancel);
  // A client that closes the connection cancels the request, even before its first token.
  exchange.OnClientGone([&cancel] { cancel.Cancel(); });
  if (request.n > 1) {  // openai_choices.h
    OpenAiChoicesSink sink(exchange, request, std::move(meta), headers, cancel,
                           deps.model->tokenizer());
    const grpc::Status status =
        RunGenerate(deps, prepared->generate, absl::InfiniteFuture(), cancel, &sink);
    exchange.OnClientGone(nullptr);
    active.Remove(&cancel);
    sink.Finish(FromGrpcStatus(status), prepared->prompt_tokens);
    return;
  }
  OpenAiSink sink(exchange, request, std::move(meta), headers, cancel, deps.model->tokenizer());
  const grpc::Status status =
      RunGenerate(deps, prepared->generate, absl::InfiniteFuture(), cancel, &sink);
  exchange.OnClientGone(nullptr);
  active.Remove(&cancel);
  sink.Finish(FromGrpcStatus(status), prepared->prompt_tokens);
}

}  // namespace tandem
