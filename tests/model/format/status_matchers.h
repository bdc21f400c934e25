// Assertions on absl::Status / StatusOr for the model tests: the code and a message substring
// must both match (abseil 20220623 ships no public status matchers).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::testing {

inline absl::Status StatusOf(const absl::Status& s) { return s; }
template <typename T>
absl::Status StatusOf(const absl::StatusOr<T>& s) {
  return s.status();
}

}  // namespace tandem::testing

#define EXPECT_STATUS_IS(expr, expected_code, substring)                                         \
  do {                                                                                           \
    const ::absl::Status tandem_s_ = ::tandem::testing::StatusOf(expr);                          \
    EXPECT_EQ(tandem_s_.code(), (expected_code)) << tandem_s_;                                   \
    EXPECT_THAT(std::string(tandem_s_.message()), ::testing::HasSubstr(substring)) << tandem_s_; \
  } while (0)

#define ASSERT_OK(expr)                                                 \
  do {                                                                  \
    const ::absl::Status tandem_s_ = ::tandem::testing::StatusOf(expr); \
    ASSERT_TRUE(tandem_s_.ok()) << tandem_s_;                           \
  } while (0)
