// Shared set-up of the two-process UCX tests: spawning the source peer helper with a
// transport's settings, and block tables with gaps.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kv_transfer/transfer_types.h"
#include "kv_transfer/ucx/kv_puller.h"
#include "kv_transfer/ucx/testing/source_peer.h"
#include "kv_transfer/ucx/testing/transports.h"

namespace tandem::testing {

// Spawns the kv_source_peer helper with `t`'s settings in its environment.
absl::StatusOr<std::unique_ptr<SourcePeerProcess>> SpawnPeer(Transport t,
                                                             const SourcePeerConfig& config);

// Virtual block tables that exercise gaps and non-monotone ids.
std::vector<int32_t> DescendingOddBlocks(int64_t count);  // 2(count-1)+1, ..., 3, 1
std::vector<int32_t> StridedBlocks(int64_t count, int32_t stride, int32_t first);

}  // namespace tandem::testing
