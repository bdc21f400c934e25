// The baseline the KV transfer is measured against (docs/design.md#performance-measurement): the
// simplest raw ucp_get loop — one ucp_get_nbx per copy, no window, no completion callbacks, no
// checks — followed by one worker flush, over the same UCX-allocated memory, transport and copy
// list.
#pragma once

#include <cstddef>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "kv_transfer/transfer_types.h"
#include "kv_transfer/ucx/remote_rank.h"
#include "kv_transfer/ucx/ucx_worker.h"

namespace tandem::bench {

// remotes[r] reaches source rank r (null for ranks no copy reads). Returns the elapsed time.
[[nodiscard]] absl::StatusOr<absl::Duration> RawGetLoop(UcxWorker& worker,
                                                        const std::vector<RemoteRank*>& remotes,
                                                        absl::Span<const TransferCopy> copies,
                                                        std::byte* local);

// The same copy list done with memcpy between local buffers (sources[r] stands in for source
// rank r's pool): the physical limit on one host.
absl::Duration MemcpyLoop(const std::vector<std::byte*>& sources,
                          absl::Span<const TransferCopy> copies, std::byte* local);

}  // namespace tandem::bench
