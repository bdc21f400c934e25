#include "tests/kv_transfer/ucx_test_env.h"

namespace tandem::testing {

absl::StatusOr<std::unique_ptr<SourcePeerProcess>> SpawnPeer(Transport t,
                                                             const SourcePeerConfig& config) {
  SourcePeerProcess::Options options;
  options.executable = TANDEM_KV_SOURCE_PEER;
  options.env = UcxEnvironment(t);
  return SourcePeerProcess::Spawn(options, config);
}

std::vector<int32_t> DescendingOddBlocks(int64_t count) {
  std::vector<int32_t> out;
  for (int64_t i = count - 1; i >= 0; --i) out.push_back(static_cast<int32_t>(2 * i + 1));
  return out;
}

std::vector<int32_t> StridedBlocks(int64_t count, int32_t stride, int32_t first) {
  std::vector<int32_t> out;
  for (int64_t i = 0; i < count; ++i) out.push_back(static_cast<int32_t>(first + i * stride));
  return out;
}

}  // namespace tandem::testing
