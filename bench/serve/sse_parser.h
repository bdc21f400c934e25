// Incremental parser of a text/event-stream body (the WHATWG "server-sent events" format that
// OpenAI-compatible servers stream): bytes go in as they arrive, complete events come out.
// Handles fields split across reads, CRLF or LF line ends, comment lines (":..."), multi-line
// data (joined with "\n") and the optional single space after the colon. A lone CR as a line end
// is not supported (no OpenAI-compatible server sends it). Pure; one parser per stream.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tandem::bench {

struct SseEvent {
  std::string event;  // the "event:" field; empty = "message"
  std::string data;
};

class SseParser {
 public:
  // Appends `bytes` and returns every event completed by them (in order).
  std::vector<SseEvent> Feed(std::string_view bytes);
  // Bytes received but not yet part of a completed event (non-empty at the end of a stream
  // means the stream was cut mid-event).
  bool HasPartialEvent() const { return !line_.empty() || has_fields_; }

 private:
  void Line(std::string_view line, std::vector<SseEvent>& out);

  std::string line_;  // the current unfinished line
  SseEvent pending_;
  bool has_fields_ = false;
  bool has_data_ = false;
};

}  // namespace tandem::bench
