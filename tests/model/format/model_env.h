// The real model for `model`-labelled tests: its path comes from TANDEM_MODEL (deploy/test.sh
// sets it from deploy/fetch-model.sh). Without it the tests skip visibly and the process exits
// 77, which ctest reports as skipped (tandem_test sets SKIP_RETURN_CODE 77 for `model` tests).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace tandem::testing {

inline std::string ModelPath() {
  const char* path = std::getenv("TANDEM_MODEL");
  return path == nullptr ? "" : path;
}

// Fixture base: skips each test when TANDEM_MODEL is unset.
class RealModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (ModelPath().empty()) GTEST_SKIP() << "TANDEM_MODEL is not set";
  }
};

// main() for a model test binary.
inline int RunModelTests(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  if (ModelPath().empty()) {
    std::fprintf(stderr,
                 "SKIPPED: TANDEM_MODEL is not set; point it at "
                 "SmolLM2-135M-Instruct.Q4_1.gguf (deploy/fetch-model.sh prints the path)\n");
    return 77;
  }
  return rc;
}

}  // namespace tandem::testing
