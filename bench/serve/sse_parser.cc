#include "bench/serve/sse_parser.h"

namespace tandem::bench {

std::vector<SseEvent> SseParser::Feed(std::string_view bytes) {
  std::vector<SseEvent> out;
  while (!bytes.empty()) {
    const size_t nl = bytes.find('\n');
    if (nl == std::string_view::npos) {
      line_.append(bytes);
      break;
    }
    line_.append(bytes.substr(0, nl));
    bytes.remove_prefix(nl + 1);
    std::string_view line = line_;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    Line(line, out);
    line_.clear();
  }
  return out;
}

void SseParser::Line(std::string_view line, std::vector<SseEvent>& out) {
  if (line.empty()) {  // dispatch
    if (has_data_) out.push_back(std::move(pending_));
    pending_ = SseEvent();
    has_fields_ = has_data_ = false;
    return;
  }
  if (line.front() == ':') return;  // comment (keep-alive)
  std::string_view field = line, value;
  const size_t colon = line.find(':');
  if (colon != std::string_view::npos) {
    field = line.substr(0, colon);
    value = line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  has_fields_ = true;
  if (field == "data") {
    if (has_data_) pending_.data.push_back('\n');
    pending_.data.append(value);
    has_data_ = true;
  } else if (field == "event") {
    pending_.event = std::string(value);
  }  // "id", "retry" and unknown fields are ignored, as the format says
}

}  // namespace tandem::bench
