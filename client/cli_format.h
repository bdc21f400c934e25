// Text the `tandem` CLI prints, and the requests it builds from its arguments: pure functions
// over the tandem.v1 messages, so the output is testable without a cluster. Thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "tandem/v1/router.pb.h"

namespace tandem {

// "1, 2,3" -> {1, 2, 3}. INVALID_ARGUMENT naming the bad entry for anything else.
[[nodiscard]] absl::StatusOr<std::vector<int32_t>> ParseTokenIds(absl::string_view list);

// What `tandem generate` was asked for. Exactly one of prompt / prompt_ids / chat is set.
struct GenerateArgs {
  std::string model;       // empty = the router's model
  std::string prompt;      // raw text
  std::string prompt_ids;  // "1,2,3"
  std::string chat;        // a user message
  std::string system;      // optional system message for chat
  int32_t max_tokens = 64;
  float temperature = 0.f;
  int32_t top_k = 0;
  float top_p = 1.f;
  uint64_t seed = 0;
  bool ignore_eos = false;
};

// INVALID_ARGUMENT when not exactly one prompt form is given, when --system comes without
// --chat, or when --prompt_ids does not parse. Value ranges are the router's to check.
[[nodiscard]] absl::StatusOr<v1::GenerateRequest> BuildGenerateRequest(const GenerateArgs& args);

// "error: UNAVAILABLE: no healthy decode node (1 known, none healthy)"
std::string FormatErrorLine(const absl::Status& status);

// Client-side measurements of one generation.
struct GenerateStats {
  int32_t tokens = 0;
  absl::Duration ttft = absl::ZeroDuration();   // request sent -> first token received
  absl::Duration total = absl::ZeroDuration();  // request sent -> final message received
  std::string finish_reason;
  int32_t retries = 0;
};

// "tokens=5 ttft_ms=12.3 tokens_per_s=40.0 finish=length retries=0". tokens_per_s counts the
// tokens after the first over the time after the first (the decode rate); with fewer than two
// tokens it is 0.
std::string FormatStats(const GenerateStats& stats);

// The fleet as an aligned table, one row per node:
//   ROLE ADDRESS HEALTHY LAYOUT(tp/pcp/dcp/B/I) RUNNING QUEUED BLOCKS(free/total) LEASES ERROR
// preceded by "model: <name>" and followed by nothing else. Every line ends in '\n'.
std::string FormatStatusTable(const v1::ClusterStatusResponse& cluster);

}  // namespace tandem
