#include "router/http/openai_choices.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "router/http/openai_tandem.h"
#include "router/http/openai_tools.h"

namespace tandem {
namespace {

constexpr char kJson[] = "application/json";

}  // namespace

OpenAiChoicesSink::OpenAiChoicesSink(HttpExchange& exchange, const OpenAiRequest& request,
                                     CompletionMeta meta, HttpExchange::Headers headers,
                                     CancellationToken& cancel, const Tokenizer& tokenizer)
    : exchange_(exchange),
      request_(request),
      meta_(std::move(meta)),
      headers_(std::move(headers)),
      cancel_(cancel),
      tools_(request.tools.has_value() && request.tools->choice != OpenAiTools::Choice::kNone) {
  choices_.reserve(request.n);
  for (int32_t i = 0; i < request.n; ++i) {
    choices_.push_back(Choice{i, StopMatcher(request.stop, request.include_stop_str_in_output)});
    if (request.sampling.logprobs >= 0)
      choices_.back().logprobs.emplace(request.endpoint, tokenizer);
  }
}

void OpenAiChoicesSink::OnProvenance(const Provenance& provenance) {
  provenance_ = ProvenanceJson(provenance);
}

bool OpenAiChoicesSink::AllEnded() const {
  return std::all_of(choices_.begin(), choices_.end(),
                     [](const Choice& c) { return !c.finish_reason.empty(); });
}

void OpenAiChoicesSink::OnDone(GenerateDone done) {
  cached_tokens_ = done.cached_tokens;
  final_ = std::move(done);
}

OpenAiChoicesSink::Choice* OpenAiChoicesSink::Live(int32_t index) {
  if (index < 0 || index >= static_cast<int32_t>(choices_.size())) return nullptr;
  Choice& c = choices_[index];
  // A choice ended by a stop string goes on generating until the request ends (the decode node
  // stops choices only together): what it sends after the match is neither sent nor counted.
  return c.finish_reason.empty() ? &c : nullptr;
}

void OpenAiChoicesSink::OnToken(GeneratedToken token) {
  Choice* const live = Live(token.choice);
  if (live == nullptr) return;
  Choice& c = *live;
  ++c.tokens;
  if (c.logprobs.has_value()) {
    c.logprobs->Add(token.id, token.logprobs.value_or(TokenLogprobs{}), token.text);
  }
  // vLLM: stop strings are matched once min_tokens tokens were generated.
  Emit(c, c.stop.Push(token.text, c.tokens > request_.sampling.min_tokens));
  Ended(c);
  // Every choice has what it wants: the rest of the generation is not wanted.
  if (AllEnded()) cancel_.Cancel();
}

void OpenAiChoicesSink::OnChoiceEnd(ChoiceEnded end) {
  Choice* const live = Live(end.choice);
  if (live == nullptr) return;
  Choice& c = *live;
  Emit(c, c.stop.Push(end.text_tail, c.tokens > request_.sampling.min_tokens));
  if (!c.stop.stopped()) {
    Emit(c, c.stop.Flush());
    c.finish_reason = end.finish_reason;
  }
  Ended(c);
}

void OpenAiChoicesSink::Ended(Choice& c) {
  if (c.stop.stopped()) c.finish_reason = "stop";
  if (!c.finish_reason.empty() && request_.stream) Close(c);
}

void OpenAiChoicesSink::Emit(Choice& c, const std::string& text) {
  if (!request_.stream || tools_) {
    c.text += text;  // with tools, parsed at the end
    if (!request_.stream) return;
  }
  StartStream();
  if (tools_) {
    // Text from where a tool call may begin is held back until the choice ends (Close).
    c.held += text;
    const size_t start = ToolCallStart(c.held, request_.tool_format);
    const std::string now = c.held.substr(0, start);
    c.held.erase(0, start);
    if (!now.empty()) {
      Write(SseEvent(
          ChunkBody(meta_, now, false, "", request_.include_usage, TakeLogprobs(c), c.index)));
    }
    return;
  }
  if (!text.empty()) {
    Write(SseEvent(
        ChunkBody(meta_, text, false, "", request_.include_usage, TakeLogprobs(c), c.index)));
  }
}

std::string OpenAiChoicesSink::ToolIdPrefix(const Choice& c) const {
  return absl::StrCat(meta_.id, "-", c.index);
}

void OpenAiChoicesSink::Close(Choice& c) {
  if (c.closed) return;
  c.closed = true;
  StartStream();
  std::string finish_reason = c.finish_reason;
  if (tools_ && !c.held.empty()) {
    // The text from where a tool call began: its calls as tool_calls deltas, or text.
    const ParsedToolOutput parsed = ParseToolCalls(c.held, request_.tool_format);
    if (parsed.calls.empty()) {
      Write(SseEvent(ChunkBody(meta_, c.held, false, "", request_.include_usage, {}, c.index)));
    } else {
      if (!parsed.content.empty()) {
        Write(SseEvent(
            ChunkBody(meta_, parsed.content, false, "", request_.include_usage, {}, c.index)));
      }
      for (const nlohmann::json& delta : ToolCallDeltas(parsed.calls, ToolIdPrefix(c))) {
        nlohmann::json chunk = nlohmann::json::parse(
            ChunkBody(meta_, "", false, "", request_.include_usage, {}, c.index));
        chunk["choices"][0]["delta"] = {{"tool_calls", nlohmann::json::array({delta})}};
        Write(SseEvent(chunk.dump()));
      }
      if (finish_reason == "stop") finish_reason = "tool_calls";
    }
  }
  if (c.logprobs.has_value() && c.logprobs->pending()) {  // tokens whose text was held back
    Write(SseEvent(
        ChunkBody(meta_, "", false, "", request_.include_usage, TakeLogprobs(c), c.index)));
  }
  Write(SseEvent(ChunkBody(meta_, "", false, finish_reason, request_.include_usage, {}, c.index)));
}

void OpenAiChoicesSink::Finish(const absl::Status& status, int32_t prompt_tokens) {
  if (client_gone_) return;
  // A request cancelled because every choice had ended on a stop string ended well.
  if (!status.ok() && !(AllEnded() && status.code() == absl::StatusCode::kCancelled)) {
    Fail(status);
    return;
  }
  CompletionUsage usage{prompt_tokens, 0, cached_tokens_};
  if (final_.has_value()) usage.prompt_tokens = final_->prompt_tokens;
  for (Choice& c : choices_) {
    usage.completion_tokens += c.tokens;
    if (c.finish_reason.empty()) c.finish_reason = "length";  // not reached: every choice ends
  }
  if (!request_.stream) {
    std::vector<CompletionChoice> out;
    std::vector<ParsedToolOutput> parsed;
    for (Choice& c : choices_) {
      out.push_back(CompletionChoice{c.index, c.text, c.finish_reason, TakeLogprobs(c)});
      if (tools_) parsed.push_back(ParseToolCalls(c.text, request_.tool_format));
    }
    std::string body = CompletionChoicesBody(meta_, out, usage);
    if (tools_) {
      nlohmann::json j = nlohmann::json::parse(body);
      for (size_t i = 0; i < choices_.size(); ++i) {
        if (parsed[i].calls.empty()) continue;
        nlohmann::json& choice = j["choices"][i];
        choice["message"]["content"] =
            parsed[i].content.empty() ? nlohmann::json(nullptr) : nlohmann::json(parsed[i].content);
        choice["message"]["tool_calls"] = ToolCallsJson(parsed[i].calls, ToolIdPrefix(choices_[i]));
        if (choice["finish_reason"] == "stop") choice["finish_reason"] = "tool_calls";
      }
      body = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
    if (request_.tandem.provenance) body = WithTandemObject(body, provenance_);
    exchange_.Respond(200, kJson, body, Headers());
    return;
  }
  for (Choice& c : choices_) Close(c);
  std::string last;
  if (request_.include_usage) last = UsageChunkBody(meta_, usage);
  if (request_.tandem.provenance) {
    if (last.empty()) {  // a chunk of no choice, for the provenance alone
      nlohmann::json chunk = nlohmann::json::parse(ChunkBody(meta_, "", false, "", false));
      chunk["choices"] = nlohmann::json::array();
      last = chunk.dump();
    }
    last = WithTandemObject(last, provenance_);
  }
  if (!last.empty()) Write(SseEvent(last));
  Write(kSseDone);
  if (!client_gone_) exchange_.EndStream();
}

std::string OpenAiChoicesSink::TakeLogprobs(Choice& c) {
  if (!c.logprobs.has_value()) return std::string();
  return c.logprobs->Take().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void OpenAiChoicesSink::StartStream() {
  if (started_) return;
  started_ = true;
  HttpExchange::Headers headers = Headers();
  headers.emplace_back("Cache-Control", "no-cache");
  if (!exchange_.StartStream(200, "text/event-stream", headers)) {
    client_gone_ = true;
    cancel_.Cancel();
    return;
  }
  if (meta_.endpoint == OpenAiEndpoint::kChatCompletions) {
    for (const Choice& c : choices_) {
      Write(SseEvent(ChunkBody(meta_, "", /*role=*/true, "", request_.include_usage, {}, c.index)));
    }
  }
}

void OpenAiChoicesSink::Write(absl::string_view data) {
  if (client_gone_) return;
  if (!exchange_.WriteChunk(data)) {
    client_gone_ = true;
    cancel_.Cancel();
  }
}

void OpenAiChoicesSink::Fail(const absl::Status& status) {
  if (!started_) {
    exchange_.Respond(HttpStatusFor(status.code()), kJson, ErrorBody(status), Headers());
    return;
  }
  Write(SseEvent(ErrorBody(status)));
  Write(kSseDone);
  if (!client_gone_) exchange_.EndStream();
}

HttpExchange::Headers OpenAiChoicesSink::Headers() const {
  HttpExchange::Headers headers = headers_;
  if (!provenance_.empty()) headers.emplace_back("x-tandem-provenance", provenance_);
  return headers;
}

}  // namespace tandem
