// What a load generator sends (BenchRequest) and what it observed for one request
// (RequestRecord). Plain data shared by the backends, the load runner and the report. Times are
// offsets: `sent_at` from the start of the run, everything else from `sent_at`.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"

namespace tandem::bench {

struct ChatTurn {
  std::string role;
  std::string content;
};

struct BenchRequest {
  // Exactly one prompt form is used: token ids if non-empty, else chat if non-empty, else text.
  std::vector<int32_t> prompt_ids;
  std::vector<ChatTurn> chat;
  std::string text;
  int32_t max_tokens = 16;
};

struct RequestRecord {
  bool ok = false;
  std::string error;         // failure class when !ok: a gRPC code name, "http_503", "curl_28", ...
  std::string error_detail;  // the message, for logs
  absl::Duration sent_at;    // from the start of the run
  // Arrival of each streamed chunk that carried at least one token, from `sent_at`.
  std::vector<absl::Duration> chunk_times;
  absl::Duration e2e;                 // until the stream ended
  int64_t prompt_tokens = 0;          // as reported by the server (or known, for token-id prompts)
  int64_t output_tokens = 0;          // tokens streamed (counted by the client where it can)
  int64_t server_output_tokens = -1;  // the server's own usage count; -1 when it sent none
};

}  // namespace tandem::bench
