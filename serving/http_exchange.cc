// HttpExchange (serving/http_server.h): the answering thread's side of a request. Each call
// formats its bytes under the exchange's lock and hands the exchange to the loop's outbox.
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "serving/http_exchange_state.h"
#include "serving/http_server.h"

namespace tandem {

void HttpExchange::State::MarkGone() {
  absl::MutexLock lock(&mu);
  if (gone) return;
  gone = true;
  if (on_gone) on_gone();
}

void HttpExchange::State::HandlerDone(const std::shared_ptr<State>& state) {
  bool need_post;
  {
    absl::MutexLock lock(&state->mu);
    state->handler_done = true;
    need_post = !state->queued;
    state->queued = true;
  }
  Post(state, need_post);
}

void HttpExchange::State::Post(const std::shared_ptr<State>& state, bool need_post) {
  if (need_post) state->outbox->Post(state);
}

void HttpExchange::OnClientGone(std::function<void()> fn) {
  absl::MutexLock lock(&state_->mu);
  state_->on_gone = std::move(fn);
  if (state_->gone && state_->on_gone) state_->on_gone();
}

std::string HttpExchange::method() const { return state_->request.method; }
std::string HttpExchange::path() const { return state_->request.path; }

std::optional<std::string> HttpExchange::header(const char* name) const {
  for (const auto& [key, value] : state_->request.headers) {
    if (absl::EqualsIgnoreCase(key, name)) return value;
  }
  return std::nullopt;
}

absl::StatusOr<std::string> HttpExchange::ReadBody(size_t max_bytes) {
  const std::string& body = state_->request.body;
  if (body.size() > max_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("request body of ", body.size(), " bytes exceeds the limit of ", max_bytes));
  }
  return body;
}

bool HttpExchange::responded() const {
  absl::MutexLock lock(&state_->mu);
  return state_->phase != State::Phase::kPending;
}

namespace {

// Begins the response in `phase` with `status`; `head` appends its first bytes to the pending
// ones (skipped when the client is gone). False when a response was begun before or the client
// is gone.
template <typename Head>
bool Begin(const std::shared_ptr<HttpExchange::State>& state, HttpExchange::State::Phase phase,
           int status, Head head) {
  bool need_post;
  bool gone;
  {
    absl::MutexLock lock(&state->mu);
    if (state->phase != HttpExchange::State::Phase::kPending) return false;
    state->phase = phase;
    state->status = status;
    gone = state->gone;
    if (!gone) head(state->pending);
    need_post = !state->queued;
    state->queued = true;
  }
  HttpExchange::State::Post(state, need_post);
  return !gone;
}

}  // namespace

bool HttpExchange::Respond(int status, absl::string_view content_type, absl::string_view body,
                           const Headers& headers) {
  const bool keep_alive = state_->keep_alive;
  return Begin(state_, State::Phase::kWhole, status, [&](std::string& pending) {
    absl::StrAppend(&pending,
                    HttpResponseHead(status, content_type, headers, body.size(), keep_alive), body);
  });
}

bool HttpExchange::StartStream(int status, absl::string_view content_type, const Headers& headers) {
  const bool keep_alive = state_->keep_alive;
  return Begin(state_, State::Phase::kStream, status, [&](std::string& pending) {
    pending += HttpResponseHead(status, content_type, headers, std::nullopt, keep_alive);
  });
}

bool HttpExchange::WriteChunk(absl::string_view data) {
  bool need_post;
  {
    absl::MutexLock lock(&state_->mu);
    if (state_->phase != State::Phase::kStream || state_->ended || state_->gone) return false;
    if (data.empty()) return true;
    AppendHttpChunk(&state_->pending, data);
    need_post = !state_->queued;
    state_->queued = true;
  }
  State::Post(state_, need_post);
  return true;
}

bool HttpExchange::EndStream() {
  bool need_post;
  {
    absl::MutexLock lock(&state_->mu);
    if (state_->phase != State::Phase::kStream || state_->gone) return false;
    if (state_->ended) return true;
    state_->ended = true;
    state_->pending.append(kHttpLastChunk.data(), kHttpLastChunk.size());
    need_post = !state_->queued;
    state_->queued = true;
  }
  State::Post(state_, need_post);
  return true;
}

}  // namespace tandem
