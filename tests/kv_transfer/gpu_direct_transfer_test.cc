// GPU-direct KV end to end on one GPU (docs/gpu.md#gpu-direct-kv): transfer_bench --memory=cuda
// pulls a small matched KV from a source process's device pool into this process's device pool
// through UCX (cuda_ipc), downloads it and verifies every byte before timing. Passes when that
// run verifies and prints its RESULT line; skips, saying why, without a GPU or without CUDA in
// the linked UCX (Debian's) — the skip reason is the benchmark's own message.
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tandem::testing {
namespace {

TEST(GpuDirectTransferTest, DeviceToDevicePullVerifiesEveryByte) {
  // Bounded by timeout(1); stderr folded in so the reason of a refusal is read back.
  const std::string command = absl::StrCat("timeout 120 ", TANDEM_TRANSFER_BENCH,
                                           " --memory=cuda --tokens=512 --reps=2 2>&1");
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof(buffer), pipe)) output.append(buffer, n);
  const int status = pclose(pipe);
  ASSERT_TRUE(WIFEXITED(status)) << output;
  const int code = WEXITSTATUS(status);
  if (code == 2 && (absl::StrContains(output, "no CUDA device") ||
                    absl::StrContains(output, "reports no CUDA memory type"))) {
    GTEST_SKIP() << output;
  }
  ASSERT_EQ(code, 0) << output;
  EXPECT_TRUE(absl::StrContains(output, "RESULT gpu_transfer_vs_memcpy=")) << output;
}

}  // namespace
}  // namespace tandem::testing
