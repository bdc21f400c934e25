// ToStatus: the one mapping from ucs_status_t to absl::Status.
#include "kv_transfer/ucx/ucx_status.h"

#include "gtest/gtest.h"
#include "tests/kv_transfer/status_matchers.h"

namespace tandem::testing {
namespace {

using ::testing::HasSubstr;

TEST(UcxStatusTest, SuccessAndInProgressAreOk) {
  EXPECT_OK(ToStatus(UCS_OK, "x"));
  EXPECT_OK(ToStatus(UCS_INPROGRESS, "x"));
}

TEST(UcxStatusTest, MapsByMeaningAndKeepsTheUcxText) {
  EXPECT_THAT(ToStatus(UCS_ERR_CONNECTION_RESET, "get from rank 1"),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("get from rank 1: Connection reset by remote peer (-25)")));
  EXPECT_THAT(ToStatus(UCS_ERR_ENDPOINT_TIMEOUT, "x"),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("(-80)")));
  EXPECT_THAT(ToStatus(static_cast<ucs_status_t>(UCS_ERR_FIRST_LINK_FAILURE - 1), "x"),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("x: ")));
  EXPECT_THAT(ToStatus(UCS_ERR_UNREACHABLE, "x"),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("unreachable")));
  EXPECT_THAT(ToStatus(UCS_ERR_CANCELED, "x"),
              StatusIs(absl::StatusCode::kCancelled, HasSubstr("(-16)")));
  EXPECT_THAT(ToStatus(UCS_ERR_TIMED_OUT, "x"),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("(-20)")));
  EXPECT_THAT(ToStatus(UCS_ERR_INVALID_PARAM, "x"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("Invalid parameter")));
  EXPECT_THAT(ToStatus(UCS_ERR_NO_MEMORY, "x"),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("(-4)")));
  EXPECT_THAT(ToStatus(UCS_ERR_UNSUPPORTED, "x"),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("(-22)")));
  EXPECT_THAT(ToStatus(UCS_ERR_NO_MESSAGE, "x"),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("(-1)")));
}

}  // namespace
}  // namespace tandem::testing
