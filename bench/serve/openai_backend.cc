#include "bench/serve/openai_backend.h"

#include <curl/curl.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/serve/sse_parser.h"
#include "nlohmann/json.hpp"

namespace tandem::bench {
namespace {

struct CurlDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
struct SlistDeleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};

// State of one streamed response, fed by libcurl's write callback.
struct StreamState {
  absl::Time start;
  CURL* curl = nullptr;
  RequestRecord* rec = nullptr;
  bool chat = false;
  long http_status = 0;
  std::string error_body;  // body of a non-200 response (first 4 KiB)
  SseParser parser;
  bool done = false;  // saw [DONE]
  std::string stream_error;
  std::string stream_error_detail;

  void OnEvent(const SseEvent& ev) {
    if (done || !stream_error.empty()) return;
    if (ev.data == "[DONE]") {
      done = true;
      return;
    }
    const nlohmann::json j = nlohmann::json::parse(ev.data, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      stream_error = "bad_json";
      stream_error_detail = ev.data.substr(0, 200);
      return;
    }
    if (j.contains("error")) {
      stream_error = "sse_error";
      stream_error_detail = j["error"].dump().substr(0, 400);
      return;
    }
    const auto choices = j.find("choices");
    if (choices != j.end() && choices->is_array() && !choices->empty()) {
      const nlohmann::json& c = (*choices)[0];
      const nlohmann::json* piece = nullptr;
      if (chat) {
        const auto delta = c.find("delta");
        if (delta != c.end() && delta->is_object()) {
          const auto content = delta->find("content");
          if (content != delta->end()) piece = &*content;
        }
      } else {
        const auto text = c.find("text");
        if (text != c.end()) piece = &*text;
      }
      if (piece != nullptr && piece->is_string() && !piece->get_ref<const std::string&>().empty()) {
        rec->chunk_times.push_back(absl::Now() - start);
        ++rec->output_tokens;
      }
    }
    const auto usage = j.find("usage");
    if (usage != j.end() && usage->is_object()) {
      if (usage->contains("completion_tokens") && (*usage)["completion_tokens"].is_number()) {
        rec->server_output_tokens = (*usage)["completion_tokens"].get<int64_t>();
      }
      if (usage->contains("prompt_tokens") && (*usage)["prompt_tokens"].is_number()) {
        rec->prompt_tokens = (*usage)["prompt_tokens"].get<int64_t>();
      }
    }
  }
};

size_t OnWrite(char* data, size_t size, size_t n, void* user) {
  auto* st = static_cast<StreamState*>(user);
  const size_t bytes = size * n;
  if (st->http_status == 0) curl_easy_getinfo(st->curl, CURLINFO_RESPONSE_CODE, &st->http_status);
  if (st->http_status != 200) {
    if (st->error_body.size() < 4096) st->error_body.append(data, bytes);
    return bytes;
  }
  for (const SseEvent& ev : st->parser.Feed(std::string_view(data, bytes))) st->OnEvent(ev);
  return bytes;
}

}  // namespace

CurlGlobal::CurlGlobal() { curl_global_init(CURL_GLOBAL_DEFAULT); }
CurlGlobal::~CurlGlobal() { curl_global_cleanup(); }

bool OpenAiBackend::chat() const { return options_.endpoint.find("chat") != std::string::npos; }

absl::Status OpenAiBackend::Check(const BenchRequest& request) const {
  if (chat() && !request.prompt_ids.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        options_.endpoint,
        " takes chat messages, not token ids: use --endpoint=/v1/completions or a --dataset"));
  }
  if (!chat() && !request.chat.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the dataset has chat conversations; ", options_.endpoint,
                     " takes a prompt: use --endpoint=/v1/chat/completions"));
  }
  return absl::OkStatus();
}

RequestRecord OpenAiBackend::Send(const BenchRequest& request, absl::Duration timeout) {
  RequestRecord rec;
  nlohmann::json body;
  if (!options_.model.empty()) body["model"] = options_.model;
  if (chat()) {
    nlohmann::json messages = nlohmann::json::array();
    if (request.chat.empty()) {
      messages.push_back({{"role", "user"}, {"content", request.text}});
    }
    for (const ChatTurn& t : request.chat) {
      messages.push_back({{"role", t.role}, {"content", t.content}});
    }
    body["messages"] = std::move(messages);
  } else if (!request.prompt_ids.empty()) {
    body["prompt"] = request.prompt_ids;
  } else {
    body["prompt"] = request.text;
  }
  body["max_tokens"] = request.max_tokens;
  body["temperature"] = 0;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  if (options_.ignore_eos) body["ignore_eos"] = true;
  const std::string payload = body.dump();
  const std::string url = options_.base_url + options_.endpoint;

  std::unique_ptr<CURL, CurlDeleter> curl(curl_easy_init());
  if (!curl) {
    rec.error = "curl_init";
    rec.error_detail = "curl_easy_init failed";
    return rec;
  }
  curl_slist* raw_headers = curl_slist_append(nullptr, "Content-Type: application/json");
  raw_headers = curl_slist_append(raw_headers, "Accept: text/event-stream");
  const std::string auth = absl::StrCat("Authorization: Bearer ", options_.api_key);
  if (!options_.api_key.empty()) raw_headers = curl_slist_append(raw_headers, auth.c_str());
  std::unique_ptr<curl_slist, SlistDeleter> headers(raw_headers);

  StreamState st;
  st.curl = curl.get();
  st.rec = &rec;
  st.chat = chat();
  CURL* c = curl.get();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_POST, 1L);
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, payload.data());
  curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, static_cast<long>(payload.size()));
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &OnWrite);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &st);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);  // threads: no SIGALRM-based DNS timeouts
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(absl::ToInt64Milliseconds(timeout)));
  curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
  if (!options_.ca_file.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, options_.ca_file.c_str());
  st.start = absl::Now();
  const CURLcode code = curl_easy_perform(c);
  rec.e2e = absl::Now() - st.start;
  if (st.http_status == 0) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st.http_status);

  if (code != CURLE_OK) {
    rec.error = absl::StrCat("curl_", static_cast<int>(code));
    rec.error_detail = curl_easy_strerror(code);
  } else if (st.http_status != 200) {
    rec.error = absl::StrCat("http_", st.http_status);
    rec.error_detail = st.error_body;
  } else if (!st.stream_error.empty()) {
    rec.error = st.stream_error;
    rec.error_detail = st.stream_error_detail;
  } else if (!st.done) {
    rec.error = "INCOMPLETE_STREAM";
    rec.error_detail = "the stream ended without data: [DONE]";
  } else {
    rec.ok = true;
    if (rec.server_output_tokens >= 0) rec.output_tokens = rec.server_output_tokens;
    if (rec.prompt_tokens == 0 && !request.prompt_ids.empty()) {
      rec.prompt_tokens = static_cast<int64_t>(request.prompt_ids.size());
    }
  }
  return rec;
}

}  // namespace tandem::bench
