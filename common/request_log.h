// One structured log line per request, in logfmt (`key=value` pairs separated by spaces, values
// quoted when they hold a space, quote, '=' or backslash), as the router and both node kinds
// write it. docs/operations.md lists the keys each process writes.
//
//   RequestLogLine line;
//   line.Add("request_id", id).Add("outcome", "OK").Add("prompt_tokens", 12).AddMillis("decode_ms",
//   d); WriteLogLine("tandem-decode", line.str());
//   // 2026-12-01T00:00:00.123Z tandem-decode: request request_id=r1 outcome=OK ...
//
// RequestLogLine is not thread-safe (build it on one thread); WriteLogLine is (one write per
// line, so lines from different threads do not interleave).
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace tandem {

class RequestLogLine {
 public:
  RequestLogLine& Add(absl::string_view key, absl::string_view value);
  RequestLogLine& Add(absl::string_view key, const char* value) {
    return Add(key, absl::string_view(value));
  }
  RequestLogLine& Add(absl::string_view key, const std::string& value) {
    return Add(key, absl::string_view(value));
  }
  RequestLogLine& Add(absl::string_view key, int64_t value);
  RequestLogLine& Add(absl::string_view key, int32_t value) {
    return Add(key, static_cast<int64_t>(value));
  }
  RequestLogLine& Add(absl::string_view key, uint64_t value) {
    return Add(key, static_cast<int64_t>(value));
  }
  // Milliseconds with one decimal ("12.3").
  RequestLogLine& AddMillis(absl::string_view key, absl::Duration d);

  // "request k=v k=v ..."
  std::string str() const { return "request" + body_; }

 private:
  std::string body_;
};

// A logfmt value: as is when it is non-empty and holds no space, quote, '=' or backslash,
// otherwise in double quotes with \ " and newline escaped.
std::string LogfmtValue(absl::string_view value);

// Writes "<UTC time> <program>: <line>\n" to stderr in one write.
void WriteLogLine(absl::string_view program, absl::string_view line);

}  // namespace tandem
