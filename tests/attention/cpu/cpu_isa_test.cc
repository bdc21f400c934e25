// The CPU kernel path switch (attention/cpu/cpu_isa.h): TANDEM_CPU_ISA's parsing, that a forced
// path is the active one for the whole process (this binary also runs as cpu_isa_test_avx2 and
// cpu_isa_test_portable, forced), that a pin still wins over it, and that a bad value ends the
// process with a message naming the variable instead of being ignored.
#include "attention/cpu/cpu_isa.h"

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace tandem {
namespace {

TEST(CpuIsaTest, ParsesTheThreePathNames) {
  absl::StatusOr<CpuIsa> portable = ParseForcedCpuIsa("portable");
  ASSERT_TRUE(portable.ok()) << portable.status();
  EXPECT_EQ(*portable, CpuIsa::kPortable);
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    absl::StatusOr<CpuIsa> parsed = ParseForcedCpuIsa(CpuIsaName(isa));
    if (CpuSupports(isa)) {
      ASSERT_TRUE(parsed.ok()) << parsed.status();
      EXPECT_EQ(*parsed, isa);
    } else {
      EXPECT_EQ(parsed.status().code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_NE(parsed.status().message().find("TANDEM_CPU_ISA"), std::string::npos);
    }
  }
}

TEST(CpuIsaTest, RefusesUnknownNamesNamingTheVariable) {
  for (const char* bad : {"avx3", "AVX2", "", "sse"}) {
    absl::StatusOr<CpuIsa> parsed = ParseForcedCpuIsa(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find("TANDEM_CPU_ISA"), std::string::npos);
    EXPECT_NE(parsed.status().message().find("avx512, avx2 or portable"), std::string::npos);
  }
}

// Under tests/forced_isa.sh the forced path is the active one and is described as forced; a pin
// overrides it, and unpinning returns to it (not to the detected path).
TEST(CpuIsaTest, TheForcedPathIsActiveAndAPinStillWins) {
  const char* env = std::getenv("TANDEM_CPU_ISA");
  const std::optional<CpuIsa> forced = ForcedCpuIsa();
  if (env == nullptr || env[0] == '\0') {
    EXPECT_FALSE(forced.has_value());
    EXPECT_EQ(ActiveCpuIsa(), DetectedCpuIsa());
    EXPECT_EQ(DescribeCpuIsa(), CpuIsaName(DetectedCpuIsa()));
    return;
  }
  ASSERT_TRUE(forced.has_value());
  EXPECT_EQ(std::string(CpuIsaName(*forced)), env);
  EXPECT_EQ(ActiveCpuIsa(), *forced);
  if (*forced != DetectedCpuIsa()) {
    EXPECT_NE(DescribeCpuIsa().find("forced by TANDEM_CPU_ISA"), std::string::npos)
        << DescribeCpuIsa();
  }
  ASSERT_TRUE(PinCpuIsa(CpuIsa::kPortable).ok());
  EXPECT_EQ(ActiveCpuIsa(), CpuIsa::kPortable);
  UnpinCpuIsa();
  EXPECT_EQ(ActiveCpuIsa(), *forced);
}

TEST(CpuIsaDeathTest, ABadValueEndsTheProcessNamingTheVariable) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process: the value is read once
  EXPECT_EXIT(
      {
        setenv("TANDEM_CPU_ISA", "avx3", 1);
        (void)ActiveCpuIsa();
      },
      ::testing::ExitedWithCode(2), "TANDEM_CPU_ISA='avx3': expected avx512, avx2 or portable");
}

}  // namespace
}  // namespace tandem
