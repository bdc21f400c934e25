// The HTTP/1.1 wire format of serving/http_server.h, apart from any socket: requests are read
// with http-parser (Debian's libhttp-parser, the parser Node.js used), responses are formatted
// here (a status line, headers, a Content-Length body or chunked framing).
//
// HttpRequestReader takes the bytes of one connection in any pieces and stops after each whole
// request (pipelined bytes after it stay unconsumed until Next), at a body over the limit — told
// by Content-Length before any of the body is taken, or once a chunked body grows past it — and
// at malformed input. Request heads are bounded by http-parser's 80 KiB header limit.
//
// Thread-safety: a reader belongs to one connection (one thread at a time); the functions are
// pure.
#pragma once

#include <http_parser.h>

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace tandem {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequestHead {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent ("/v1/models?x=1")
  std::string path;    // the target's path ("/v1/models"), no query
  HttpHeaders headers;
  std::string body;              // complete for kRequest; what was read for kTooLarge
  bool keep_alive = false;       // the client allows another request on this connection
  bool expect_continue = false;  // "Expect: 100-continue": it waits for a 100 before the body
};

class HttpRequestReader {
 public:
  enum class Result {
    kNeedMore,  // every byte given was consumed; the request is not complete yet
    kRequest,   // request() is complete
    kTooLarge,  // request() has the head; its body exceeds max_body_bytes (not all read)
    kBad,       // malformed: error() says why; the connection cannot continue
  };

  // REQUIRES: max_body_bytes > 0.
  explicit HttpRequestReader(size_t max_body_bytes);
  HttpRequestReader(const HttpRequestReader&) = delete;
  HttpRequestReader& operator=(const HttpRequestReader&) = delete;

  // Parses from `data`; *consumed is how many of its bytes were taken (all of them for
  // kNeedMore; up to the request's end for kRequest). Once it returned anything but kNeedMore it
  // consumes nothing and returns the same until Next. REQUIRES: !data.empty().
  Result Feed(absl::string_view data, size_t* consumed);
  // After kRequest: forget that request and read the next one.
  void Next();

  const HttpRequestHead& request() const { return request_; }
  HttpRequestHead& request() { return request_; }
  const std::string& error() const { return error_; }

 private:
  static int OnMessageBegin(http_parser* p);
  static int OnUrl(http_parser* p, const char* at, size_t n);
  static int OnHeaderField(http_parser* p, const char* at, size_t n);
  static int OnHeaderValue(http_parser* p, const char* at, size_t n);
  static int OnHeadersComplete(http_parser* p);
  static int OnBody(http_parser* p, const char* at, size_t n);
  static int OnMessageComplete(http_parser* p);

  const size_t max_body_bytes_;
  http_parser parser_;
  http_parser_settings settings_;
  HttpRequestHead request_;
  bool in_value_ = false;  // the last header callback was a value
  std::optional<Result> stopped_;
  std::string error_;
};

// The head of a response: status line, `content_type`, `headers` (a name or value holding CR or
// LF is dropped), then Content-Length: `content_length`, or Transfer-Encoding: chunked when
// nullopt, and Connection: keep-alive or close.
std::string HttpResponseHead(int status, absl::string_view content_type, const HttpHeaders& headers,
                             std::optional<size_t> content_length, bool keep_alive);
// The interim response a client that sent "Expect: 100-continue" waits for.
inline constexpr absl::string_view kHttpContinue = "HTTP/1.1 100 Continue\r\n\r\n";
// Appends `data` as one chunk of a chunked body (nothing for empty data: an empty chunk would
// end the body).
void AppendHttpChunk(std::string* out, absl::string_view data);
// The chunk that ends a chunked body.
inline constexpr absl::string_view kHttpLastChunk = "0\r\n\r\n";

}  // namespace tandem
