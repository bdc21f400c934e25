// Shared set-up of the two-process UCX tests: transports, the source peer executable, and
// helpers that pull a planned transfer into freshly poisoned destination pools.
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

namespace tandem::testing {

enum class Transport { kSharedMemory, kTcp };

std::string TransportName(Transport t);

// UCX settings (names without the UCX_ prefix) that pin a transport, for both processes.
std::vector<std::pair<std::string, std::string>> UcxSettings(Transport t);

// Spawns the kv_source_peer helper with `t`'s settings in its environment.
absl::StatusOr<std::unique_ptr<SourcePeerProcess>> SpawnPeer(Transport t,
                                                             const SourcePeerConfig& config);

// Virtual block tables that exercise gaps and non-monotone ids.
std::vector<int32_t> DescendingOddBlocks(int64_t count);  // 2(count-1)+1, ..., 3, 1
std::vector<int32_t> StridedBlocks(int64_t count, int32_t stride, int32_t first);

}  // namespace tandem::testing
