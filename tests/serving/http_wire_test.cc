// HttpRequestReader and the response formatting (serving/http_wire.h): requests in any pieces,
// pipelined requests, bodies over the limit by Content-Length and chunked, malformed input.
#include "serving/http_wire.h"

#include <gtest/gtest.h>

#include <string>

namespace tandem {
namespace {

using Result = HttpRequestReader::Result;

// Feeds `bytes` `piece` bytes at a time until the reader stops; the bytes it consumed.
Result FeedAll(HttpRequestReader& reader, const std::string& bytes, size_t piece,
               size_t* consumed_total) {
  *consumed_total = 0;
  Result result = Result::kNeedMore;
  while (*consumed_total < bytes.size()) {
    const size_t n = std::min(piece, bytes.size() - *consumed_total);
    size_t consumed = 0;
    result = reader.Feed(absl::string_view(bytes).substr(*consumed_total, n), &consumed);
    *consumed_total += consumed;
    if (result != Result::kNeedMore) break;
    EXPECT_EQ(consumed, n);
  }
  return result;
}

TEST(HttpRequestReaderTest, ReadsARequestInAnyPieces) {
  const std::string request =
      "POST /v1/completions?stream=1 HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "X-Long-Header: " +
      std::string(300, 'v') + "\r\nContent-Length: 7\r\n\r\n{\"a\":1}";
  for (size_t piece : {size_t{1}, size_t{3}, size_t{64}, request.size()}) {
    HttpRequestReader reader(1024);
    size_t consumed = 0;
    ASSERT_EQ(FeedAll(reader, request, piece, &consumed), Result::kRequest) << piece;
    EXPECT_EQ(consumed, request.size());
    const HttpRequestHead& head = reader.request();
    EXPECT_EQ(head.method, "POST");
    EXPECT_EQ(head.target, "/v1/completions?stream=1");
    EXPECT_EQ(head.path, "/v1/completions");
    EXPECT_EQ(head.body, "{\"a\":1}");
    EXPECT_TRUE(head.keep_alive);
    ASSERT_EQ(head.headers.size(), 4u);
    EXPECT_EQ(head.headers[2].first, "X-Long-Header");
    EXPECT_EQ(head.headers[2].second, std::string(300, 'v'));
  }
}

TEST(HttpRequestReaderTest, StopsAfterEachPipelinedRequest) {
  const std::string first = "GET /a HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string second = "GET /b HTTP/1.1\r\nConnection: close\r\n\r\n";
  HttpRequestReader reader(1024);
  size_t consumed = 0;
  ASSERT_EQ(reader.Feed(first + second, &consumed), Result::kRequest);
  EXPECT_EQ(consumed, first.size());
  EXPECT_EQ(reader.request().path, "/a");
  // Stopped until Next: nothing more is consumed.
  EXPECT_EQ(reader.Feed(second, &consumed), Result::kRequest);
  EXPECT_EQ(consumed, 0u);
  reader.Next();
  ASSERT_EQ(reader.Feed(second, &consumed), Result::kRequest);
  EXPECT_EQ(consumed, second.size());
  EXPECT_EQ(reader.request().path, "/b");
  EXPECT_FALSE(reader.request().keep_alive);
}

TEST(HttpRequestReaderTest, RefusesABodyOverTheLimitBeforeReadingIt) {
  HttpRequestReader reader(10);
  const std::string head = "POST /x HTTP/1.1\r\nContent-Length: 11\r\nExpect: 100-continue\r\n\r\n";
  size_t consumed = 0;
  ASSERT_EQ(reader.Feed(head + "0123456789a", &consumed), Result::kTooLarge);
  EXPECT_LE(consumed, head.size());  // not one byte of the body
  EXPECT_EQ(reader.request().path, "/x");
  EXPECT_TRUE(reader.request().expect_continue);
  EXPECT_TRUE(reader.request().body.empty());
}

TEST(HttpRequestReaderTest, RefusesAChunkedBodyOnceItPassesTheLimit) {
  HttpRequestReader reader(10);
  const std::string request =
      "POST /x HTTP/1.1\r\nTransfer-Encoding: "
      "chunked\r\n\r\n6\r\n012345\r\n6\r\n6789ab\r\n0\r\n\r\n";
  size_t consumed = 0;
  EXPECT_EQ(reader.Feed(request, &consumed), Result::kTooLarge);
  EXPECT_LT(consumed, request.size());
  // Within the limit, a chunked body is joined.
  HttpRequestReader roomy(12);
  ASSERT_EQ(roomy.Feed(request, &consumed), Result::kRequest);
  EXPECT_EQ(roomy.request().body, "0123456789ab");
}

TEST(HttpRequestReaderTest, MalformedInputIsBadWithAReason) {
  HttpRequestReader reader(1024);
  size_t consumed = 0;
  EXPECT_EQ(reader.Feed("NOT HTTP AT ALL\r\n\r\n", &consumed), Result::kBad);
  EXPECT_FALSE(reader.error().empty());
  HttpRequestReader headers(1024);
  EXPECT_EQ(headers.Feed("GET / HTTP/1.1\r\nBad Header\r\n\r\n", &consumed), Result::kBad);
  EXPECT_FALSE(headers.error().empty());
}

TEST(HttpResponseTest, HeadsAndChunks) {
  EXPECT_EQ(
      HttpResponseHead(200, "text/plain", {{"X-A", "1"}, {"X-Bad", "a\r\nInjected: 1"}}, 5, true),
      "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-A: 1\r\nContent-Length: 5\r\n"
      "Connection: keep-alive\r\n\r\n");
  EXPECT_EQ(HttpResponseHead(404, "", {}, std::nullopt, false),
            "HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n");
  std::string body;
  AppendHttpChunk(&body, "data: x\n\n");
  AppendHttpChunk(&body, "");
  AppendHttpChunk(&body, std::string(26, 'z'));
  EXPECT_EQ(body, "9\r\ndata: x\n\n\r\n1a\r\n" + std::string(26, 'z') + "\r\n");
}

}  // namespace
}  // namespace tandem
