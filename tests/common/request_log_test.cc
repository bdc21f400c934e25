// The per-request logfmt line: key order, number formats, and quoting of values a logfmt parser
// would otherwise split.
#include "common/request_log.h"

#include "gtest/gtest.h"

namespace tandem {
namespace {

TEST(RequestLogTest, KeysInOrderWithMillisecondsToOneDecimal) {
  RequestLogLine line;
  line.Add("request_id", "r-1")
      .Add("outcome", std::string("OK"))
      .Add("prompt_tokens", int32_t{12})
      .Add("transfer_bytes", int64_t{1} << 40)
      .AddMillis("decode_ms", absl::Microseconds(12345))
      .AddMillis("queue_ms", absl::ZeroDuration());
  EXPECT_EQ(line.str(),
            "request request_id=r-1 outcome=OK prompt_tokens=12 transfer_bytes=1099511627776 "
            "decode_ms=12.3 queue_ms=0.0");
}

TEST(RequestLogTest, QuotesValuesThatWouldSplitTheLine) {
  EXPECT_EQ(LogfmtValue("plain-127.0.0.1:5000/x"), "plain-127.0.0.1:5000/x");
  EXPECT_EQ(LogfmtValue(""), "\"\"");
  EXPECT_EQ(LogfmtValue("two words"), "\"two words\"");
  EXPECT_EQ(LogfmtValue("a=b"), "\"a=b\"");
  EXPECT_EQ(LogfmtValue("say \"hi\" \\ bye\nnext"), "\"say \\\"hi\\\" \\\\ bye\\nnext\"");
  RequestLogLine line;
  line.Add("outcome", "UNAVAILABLE").Add("error", "prefill node 1.2.3.4:5: connection refused");
  EXPECT_EQ(line.str(),
            "request outcome=UNAVAILABLE error=\"prefill node 1.2.3.4:5: connection refused\"");
}

}  // namespace
}  // namespace tandem
