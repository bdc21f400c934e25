#include "common/request_log.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace tandem {

std::string LogfmtValue(absl::string_view value) {
  bool plain = !value.empty();
  for (char c : value) {
    if (c == ' ' || c == '"' || c == '=' || c == '\\' || c == '\n' || c == '\t') plain = false;
  }
  if (plain) return std::string(value);
  std::string out = "\"";
  for (char c : value) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

RequestLogLine& RequestLogLine::Add(absl::string_view key, absl::string_view value) {
  absl::StrAppend(&body_, " ", key, "=", LogfmtValue(value));
  return *this;
}

RequestLogLine& RequestLogLine::Add(absl::string_view key, int64_t value) {
  absl::StrAppend(&body_, " ", key, "=", value);
  return *this;
}

RequestLogLine& RequestLogLine::AddMillis(absl::string_view key, absl::Duration d) {
  absl::StrAppend(&body_, " ", key, "=", absl::StrFormat("%.1f", absl::ToDoubleMilliseconds(d)));
  return *this;
}

void WriteLogLine(absl::string_view program, absl::string_view line) {
  const std::string out =
      absl::StrCat(absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone()), " ",
                   program, ": ", line, "\n");
  std::fwrite(out.data(), 1, out.size(), stderr);
}

}  // namespace tandem
