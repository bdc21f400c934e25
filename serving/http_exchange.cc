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

bool HttpExchange::Respond(int status, absl::string_view content_type, absl::string_view body,
                           const Headers& headers) {
  bool need_post;
  bool gone;
  {
    absl::MutexLock lock(&state_->mu);
    if (state_->phase != State::Phase::kPending) return false;
    state_->phase = State::Phase::kWhole;
    state_->status = status;
    gone = state_->gone;
    if (!gone) {
      absl::StrAppend(
          &state_->pending,
          HttpResponseHead(status, content_type, headers, body.size(), state_->keep_alive), body);
    }
    need_post = !state_->queued;
    state_->queued = true;
  }
  State::Post(state_, need_post);
  return !gone;
}

bool HttpExchange::StartStream(int status, absl::string_view content_type, const Headers& headers) {
  bool need_post;
  bool gone;
  {
    absl::MutexLock lock(&state_->mu);
    if (state_->phase != State::Phase::kPending) return false;
    state_->phase = State::Phase::kStream;
    state_->status = status;
    gone = state_->gone;
    if (!gone) {
      state_->pending +=
          HttpResponseHead(status, content_type, headers, std::nullopt, state_->keep_alive);
    }
    need_post = !state_->queued;
    state_->queued = true;
  }
  State::Post(state_, need_post);
  return !gone;
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
