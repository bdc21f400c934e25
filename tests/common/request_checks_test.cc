#include "common/request_checks.h"

#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tandem {
namespace {

void ExpectInvalid(const absl::Status& s, const std::string& message) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(s.message(), message);
}

TEST(CheckTokenIdsTest, EveryIdInTheVocabulary) {
  EXPECT_TRUE(CheckTokenIds(std::vector<int32_t>{0, 4}, 5, "prompt").ok());
  ExpectInvalid(CheckTokenIds({}, 5, "prompt"), "prompt is empty");
  ExpectInvalid(CheckTokenIds(std::vector<int32_t>{0, 5}, 5, "prompt"),
                "prompt token id 5 at position 1 is outside the vocabulary [0, 5)");
  ExpectInvalid(CheckTokenIds(std::vector<int32_t>{-1}, 5, "prompt"),
                "prompt token id -1 at position 0 is outside the vocabulary [0, 5)");
}

TEST(CheckTokenIdTest, OneIdInTheVocabulary) {
  EXPECT_TRUE(CheckTokenId(0, 5, "first token").ok());
  EXPECT_TRUE(CheckTokenId(4, 5, "first token").ok());
  ExpectInvalid(CheckTokenId(5, 5, "first token"),
                "first token 5 is outside the vocabulary [0, 5)");
  ExpectInvalid(CheckTokenId(-2, 5, "first token"),
                "first token -2 is outside the vocabulary [0, 5)");
}

TEST(CheckTokenBudgetTest, AtLeastTheMinimum) {
  EXPECT_TRUE(CheckTokenBudget(1, "max_tokens").ok());
  ExpectInvalid(CheckTokenBudget(0, "max_tokens"), "max_tokens must be >= 1 (got 0)");
  EXPECT_TRUE(CheckTokenBudget(0, "max_new_tokens", 0).ok());
  ExpectInvalid(CheckTokenBudget(-1, "max_new_tokens", 0), "max_new_tokens must be >= 0 (got -1)");
}

TEST(CheckContextFitTest, PromptAndNewTokensFitTheContext) {
  EXPECT_TRUE(CheckContextFit(31, 1, "max_tokens", 32).ok());
  EXPECT_TRUE(CheckContextFit(1 << 20, 1 << 20, "max_tokens", 0).ok());  // no stated context
  ExpectInvalid(CheckContextFit(33, 0, "max_tokens", 32),
                "prompt has 33 tokens, more than the model's context length 32");
  ExpectInvalid(CheckContextFit(10, 23, "max_new_tokens", 32),
                "prompt (10 tokens) + max_new_tokens (23) = 33 exceeds the model's context "
                "length 32");
  // Found by fuzz_request: the sum overflowed int64 (undefined behaviour) for huge values, and a
  // negative length (e.g. a peer's KV handle num_tokens) passed.
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  ExpectInvalid(CheckContextFit(10, kMax, "max_new_tokens", kMax),
                "prompt (10 tokens) + max_new_tokens (9223372036854775807) = more than 2^63 "
                "exceeds the model's context length 9223372036854775807");
  ExpectInvalid(CheckContextFit(-8353574464478248961, -8353574464478248961, "max_new_tokens", 64),
                "prompt length (-8353574464478248961) and max_new_tokens (-8353574464478248961) "
                "must be >= 0");
  ExpectInvalid(CheckContextFit(-5, 10, "max_new_tokens", 64),
                "prompt length (-5) and max_new_tokens (10) must be >= 0");
}

}  // namespace
}  // namespace tandem
