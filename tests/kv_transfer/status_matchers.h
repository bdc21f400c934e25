// gMock matchers for absl::Status / absl::StatusOr (abseil 20220623 ships none publicly):
//   EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rkey")));
//   ASSERT_OK(expr);  EXPECT_OK(expr);
#pragma once

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::testing {

inline const absl::Status& GetStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

MATCHER_P2(StatusIs, code, message_matcher,
           "has code " + absl::StatusCodeToString(code) + " and a message that " +
               ::testing::DescribeMatcher<std::string>(message_matcher)) {
  const absl::Status& s = ::tandem::testing::GetStatus(arg);
  *result_listener << "whose status is " << s.ToString();
  return s.code() == code &&
         ::testing::ExplainMatchResult(message_matcher, std::string(s.message()), result_listener);
}

}  // namespace tandem::testing

#define TANDEM_EXPECT_OK_IMPL_(macro, expr)                                 \
  do {                                                                      \
    const ::absl::Status tandem_s_ = ::tandem::testing::GetStatus(expr);    \
    macro(tandem_s_.ok()) << #expr << " returned " << tandem_s_.ToString(); \
  } while (0)
#define EXPECT_OK(expr) TANDEM_EXPECT_OK_IMPL_(EXPECT_TRUE, expr)
#define ASSERT_OK(expr) TANDEM_EXPECT_OK_IMPL_(ASSERT_TRUE, expr)
