// Backend for any OpenAI-compatible HTTP server (Tandem's router, llama.cpp's llama-server,
// vLLM): POST <base_url><endpoint> with "stream": true and stream_options.include_usage, read
// the SSE stream with libcurl. Endpoints:
//   /v1/completions       token-id prompts as "prompt": [ids...], text prompts as a string
//   /v1/chat/completions  chat conversations as "messages" (a text prompt becomes one user turn)
// A chunk whose choices[0].text (completions) or choices[0].delta.content (chat) is non-empty
// counts as a token chunk; output tokens are the final usage chunk's completion_tokens when the
// server sends one, else the number of token chunks. Failures: "http_<status>", "curl_<code>",
// "sse_error" (an {"error": ...} event), "bad_json", "INCOMPLETE_STREAM" (no [DONE]).
//
// Thread-safety: Send may be called concurrently (one curl easy handle per call). The process
// must call curl_global_init once before the first Send (main does; CurlGlobal below).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "bench/serve/backend.h"

namespace tandem::bench {

struct OpenAiOptions {
  std::string base_url = "http://127.0.0.1:8080";
  std::string endpoint = "/v1/completions";
  std::string model;       // "model" field; empty = omitted
  std::string api_key;     // Authorization: Bearer; empty = none
  std::string ca_file;     // https: PEM CA the server's certificate must chain to; empty = system
  bool ignore_eos = true;  // sent as "ignore_eos" (llama-server, vLLM, Tandem)
};

// RAII for curl_global_init/curl_global_cleanup; one per process, before any thread starts.
class CurlGlobal {
 public:
  CurlGlobal();
  ~CurlGlobal();
  CurlGlobal(const CurlGlobal&) = delete;
  CurlGlobal& operator=(const CurlGlobal&) = delete;
};

class OpenAiBackend : public Backend {
 public:
  explicit OpenAiBackend(OpenAiOptions options) : options_(std::move(options)) {}
  // kInvalidArgument when `request`'s prompt form cannot go to the configured endpoint.
  absl::Status Check(const BenchRequest& request) const;
  RequestRecord Send(const BenchRequest& request, absl::Duration timeout) override;

 private:
  bool chat() const;
  const OpenAiOptions options_;
};

}  // namespace tandem::bench
