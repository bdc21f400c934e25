// RunHttpStreams (capacity_clients.h): POST /v1/completions with stream=true per stream, through
// libcurl's multi interface on kClientThreads threads (stream i on thread i % kClientThreads: one
// thread's parsing saturated a core at 1,000 streams and became the bench's own latency); a token
// is a `data:` event whose first choice carries text.
#include <curl/curl.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "bench/router/capacity_clients.h"
#include "nlohmann/json.hpp"

namespace tandem::bench {
namespace {

constexpr int kClientThreads = 2;

struct HttpStream {
  StreamResult* result = nullptr;
  std::string body;
  std::string pending;  // bytes after the last complete line
  bool done_event = false;
  curl_slist* headers = nullptr;
  CURL* easy = nullptr;
};

// One complete SSE line. A token is an event whose first choice carries text: the router writes
// one choice per event, so the event's "text" string is looked at without a JSON parse (which cost
// the client thread more than the router spent relaying the token).
void OnLine(HttpStream& s, const std::string& line) {
  if (!absl::StartsWith(line, "data: ")) return;
  const absl::string_view data = absl::string_view(line).substr(6);
  if (data == "[DONE]") {
    s.done_event = true;
    return;
  }
  constexpr absl::string_view kText = "\"text\":\"";
  const size_t text = data.find(kText);
  if (text != absl::string_view::npos && text + kText.size() < data.size() &&
      data[text + kText.size()] != '"') {
    s.result->token_times.push_back(absl::Now());
  }
}

size_t OnData(char* data, size_t size, size_t n, void* user) {
  HttpStream& s = *static_cast<HttpStream*>(user);
  s.pending.append(data, size * n);
  size_t start = 0;
  for (size_t nl; (nl = s.pending.find('\n', start)) != std::string::npos; start = nl + 1) {
    std::string line = s.pending.substr(start, nl - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    OnLine(s, line);
  }
  s.pending.erase(0, start);
  return size * n;
}

// The streams i with i % kClientThreads == part, on this thread.
void RunPart(const LoadSpec& spec, int part, absl::Time start, std::vector<StreamResult>& results,
             std::vector<HttpStream>& streams) {
  CURLM* multi = curl_multi_init();
  const std::string url = absl::StrCat(spec.target, "/v1/completions");
  const absl::Time deadline = start + spec.timeout;
  int added = part;  // the next stream of this part to start
  int running = 0;
  while (true) {
    const absl::Time now = absl::Now();
    // Start the streams whose time has come (the load's schedule).
    while (added < spec.streams && start + spec.spread * added / spec.streams <= now) {
      HttpStream& s = streams[added];
      s.result = &results[added];
      s.result->client_id = absl::StrCat(spec.id_prefix, added);
      s.body = nlohmann::json{
          {"model", spec.model},
          {"prompt", "hello"},
          {"max_tokens", spec.tokens},
          {"stream",
           true}}.dump();
      s.headers = curl_slist_append(nullptr, "Content-Type: application/json");
      s.headers =
          curl_slist_append(s.headers, absl::StrCat("x-request-id: ", s.result->client_id).c_str());
      s.easy = curl_easy_init();
      curl_easy_setopt(s.easy, CURLOPT_URL, url.c_str());
      curl_easy_setopt(s.easy, CURLOPT_HTTPHEADER, s.headers);
      curl_easy_setopt(s.easy, CURLOPT_POSTFIELDS, s.body.c_str());
      curl_easy_setopt(s.easy, CURLOPT_WRITEFUNCTION, OnData);
      curl_easy_setopt(s.easy, CURLOPT_WRITEDATA, &s);
      curl_easy_setopt(s.easy, CURLOPT_PRIVATE, &s);
      curl_easy_setopt(s.easy, CURLOPT_TCP_NODELAY, 1L);
      curl_easy_setopt(s.easy, CURLOPT_TIMEOUT_MS,
                       static_cast<long>(absl::ToInt64Milliseconds(deadline - now)));
      curl_multi_add_handle(multi, s.easy);
      added += kClientThreads;
    }
    curl_multi_perform(multi, &running);
    int queued = 0;
    while (CURLMsg* msg = curl_multi_info_read(multi, &queued)) {
      if (msg->msg != CURLMSG_DONE) continue;
      HttpStream* s = nullptr;
      curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &s);
      long code = 0;
      curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &code);
      s->result->ok = msg->data.result == CURLE_OK && code == 200 && s->done_event;
      if (!s->result->ok) {
        s->result->error = absl::StrCat("curl ", curl_easy_strerror(msg->data.result), ", HTTP ",
                                        code, s->done_event ? "" : ", no [DONE]");
      }
    }
    if (added >= spec.streams && running == 0) break;
    // Wake for the next start at the latest; curl bounds each transfer by CURLOPT_TIMEOUT_MS.
    int wait_ms = 100;
    if (added < spec.streams) {
      const absl::Duration until = start + spec.spread * added / spec.streams - absl::Now();
      wait_ms = static_cast<int>(std::clamp<int64_t>(absl::ToInt64Milliseconds(until), 0, 100));
    }
    curl_multi_poll(multi, nullptr, 0, wait_ms, nullptr);
  }
  for (int i = part; i < spec.streams; i += kClientThreads) {
    HttpStream& s = streams[i];
    if (s.easy == nullptr) continue;
    curl_multi_remove_handle(multi, s.easy);
    curl_easy_cleanup(s.easy);
    curl_slist_free_all(s.headers);
  }
  curl_multi_cleanup(multi);
}

}  // namespace

std::vector<StreamResult> RunHttpStreams(const LoadSpec& spec) {
  std::vector<StreamResult> results(spec.streams);
  std::vector<HttpStream> streams(spec.streams);
  const absl::Time start = absl::Now();
  std::vector<std::thread> parts;
  for (int part = 0; part < kClientThreads; ++part) {
    parts.emplace_back([&, part] { RunPart(spec, part, start, results, streams); });
  }
  // Each part ends when its transfers did, each bounded by CURLOPT_TIMEOUT_MS.
  for (std::thread& t : parts) t.join();
  return results;
}

}  // namespace tandem::bench
