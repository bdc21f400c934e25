#include "serving/http_wire.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tandem {
namespace {

HttpRequestReader* ReaderOf(http_parser* p) { return static_cast<HttpRequestReader*>(p->data); }

bool ValidField(absl::string_view s) { return s.find_first_of("\r\n") == absl::string_view::npos; }

}  // namespace

HttpRequestReader::HttpRequestReader(size_t max_body_bytes) : max_body_bytes_(max_body_bytes) {
  http_parser_init(&parser_, HTTP_REQUEST);
  parser_.data = this;
  http_parser_settings_init(&settings_);
  settings_.on_message_begin = &OnMessageBegin;
  settings_.on_url = &OnUrl;
  settings_.on_header_field = &OnHeaderField;
  settings_.on_header_value = &OnHeaderValue;
  settings_.on_headers_complete = &OnHeadersComplete;
  settings_.on_body = &OnBody;
  settings_.on_message_complete = &OnMessageComplete;
}

HttpRequestReader::Result HttpRequestReader::Feed(absl::string_view data, size_t* consumed) {
  *consumed = 0;
  if (stopped_.has_value()) return *stopped_;
  *consumed = http_parser_execute(&parser_, &settings_, data.data(), data.size());
  if (stopped_.has_value()) return *stopped_;  // paused by a callback
  if (HTTP_PARSER_ERRNO(&parser_) != HPE_OK) {
    error_ = http_errno_description(HTTP_PARSER_ERRNO(&parser_));
    stopped_ = Result::kBad;
    return *stopped_;
  }
  return Result::kNeedMore;
}

void HttpRequestReader::Next() {
  if (stopped_ != Result::kRequest) return;
  stopped_.reset();
  request_ = HttpRequestHead();
  http_parser_pause(&parser_, 0);
}

int HttpRequestReader::OnMessageBegin(http_parser* p) {
  HttpRequestReader* r = ReaderOf(p);
  r->request_ = HttpRequestHead();
  r->in_value_ = false;
  return 0;
}

int HttpRequestReader::OnUrl(http_parser* p, const char* at, size_t n) {
  ReaderOf(p)->request_.target.append(at, n);
  return 0;
}

int HttpRequestReader::OnHeaderField(http_parser* p, const char* at, size_t n) {
  HttpRequestReader* r = ReaderOf(p);
  if (r->in_value_ || r->request_.headers.empty()) r->request_.headers.emplace_back();
  r->in_value_ = false;
  r->request_.headers.back().first.append(at, n);
  return 0;
}

int HttpRequestReader::OnHeaderValue(http_parser* p, const char* at, size_t n) {
  HttpRequestReader* r = ReaderOf(p);
  r->in_value_ = true;
  r->request_.headers.back().second.append(at, n);
  return 0;
}

int HttpRequestReader::OnHeadersComplete(http_parser* p) {
  HttpRequestReader* r = ReaderOf(p);
  HttpRequestHead& req = r->request_;
  req.method = http_method_str(static_cast<http_method>(p->method));
  req.keep_alive = http_should_keep_alive(p) != 0;
  http_parser_url url;
  http_parser_url_init(&url);
  if (http_parser_parse_url(req.target.data(), req.target.size(), /*is_connect=*/0, &url) != 0) {
    r->error_ = absl::StrCat("malformed request target '", req.target.substr(0, 200), "'");
    r->stopped_ = Result::kBad;
    http_parser_pause(p, 1);
    return 0;
  }
  if ((url.field_set & (1 << UF_PATH)) != 0) {
    req.path = req.target.substr(url.field_data[UF_PATH].off, url.field_data[UF_PATH].len);
  } else {
    req.path = "/";
  }
  for (const auto& [name, value] : req.headers) {
    if (absl::EqualsIgnoreCase(name, "Expect") && absl::EqualsIgnoreCase(value, "100-continue")) {
      req.expect_continue = true;
    }
  }
  if ((p->flags & F_CONTENTLENGTH) != 0 && p->content_length > r->max_body_bytes_) {
    r->stopped_ = Result::kTooLarge;
    http_parser_pause(p, 1);
  }
  return 0;
}

int HttpRequestReader::OnBody(http_parser* p, const char* at, size_t n) {
  HttpRequestReader* r = ReaderOf(p);
  if (r->request_.body.size() + n > r->max_body_bytes_) {  // a chunked body past the limit
    r->stopped_ = Result::kTooLarge;
    http_parser_pause(p, 1);
    return 0;
  }
  r->request_.body.append(at, n);
  return 0;
}

int HttpRequestReader::OnMessageComplete(http_parser* p) {
  HttpRequestReader* r = ReaderOf(p);
  r->stopped_ = Result::kRequest;
  http_parser_pause(p, 1);
  return 0;
}

std::string HttpResponseHead(int status, absl::string_view content_type, const HttpHeaders& headers,
                             std::optional<size_t> content_length, bool keep_alive) {
  std::string head = absl::StrCat("HTTP/1.1 ", status, " ",
                                  http_status_str(static_cast<http_status>(status)), "\r\n");
  if (!content_type.empty() && ValidField(content_type)) {
    absl::StrAppend(&head, "Content-Type: ", content_type, "\r\n");
  }
  for (const auto& [name, value] : headers) {
    if (name.empty() || !ValidField(name) || !ValidField(value)) continue;
    absl::StrAppend(&head, name, ": ", value, "\r\n");
  }
  if (content_length.has_value()) {
    absl::StrAppend(&head, "Content-Length: ", *content_length, "\r\n");
  } else {
    head += "Transfer-Encoding: chunked\r\n";
  }
  absl::StrAppend(&head, "Connection: ", keep_alive ? "keep-alive" : "close", "\r\n\r\n");
  return head;
}

void AppendHttpChunk(std::string* out, absl::string_view data) {
  if (data.empty()) return;
  absl::StrAppend(out, absl::Hex(data.size()), "\r\n", data, "\r\n");
}

}  // namespace tandem
