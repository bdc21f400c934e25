#include "bench/transfer/raw_get_loop.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "kv_transfer/ucx/ucx_status.h"

namespace tandem::bench {

absl::StatusOr<absl::Duration> RawGetLoop(UcxWorker& worker,
                                          const std::vector<RemoteRank*>& remotes,
                                          absl::Span<const TransferCopy> copies, std::byte* local) {
  ucp_request_param_t param{};
  const absl::Time start = absl::Now();
  for (const TransferCopy& c : copies) {
    RemoteRank* r = remotes[c.src_rank];
    ucs_status_ptr_t request =
        ucp_get_nbx(r->endpoint(), local + c.dst_offset, static_cast<size_t>(c.length),
                    r->pool_base() + static_cast<uint64_t>(c.src_offset), r->rkey(), &param);
    if (UCS_PTR_IS_ERR(request)) return ToStatus(UCS_PTR_STATUS(request), "raw ucp_get_nbx");
    if (request != nullptr) ucp_request_free(request);  // completion comes from the flush
  }
  ucs_status_ptr_t flush = ucp_worker_flush_nbx(worker.get(), &param);
  if (UCS_PTR_IS_ERR(flush)) return ToStatus(UCS_PTR_STATUS(flush), "ucp_worker_flush_nbx");
  if (flush != nullptr) {
    const absl::Time deadline = absl::Now() + absl::Seconds(120);
    while (ucp_request_check_status(flush) == UCS_INPROGRESS) {
      if (absl::Now() > deadline) {
        ucp_request_free(flush);
        return absl::DeadlineExceededError("raw get loop: flush did not complete in 120 s");
      }
      worker.ProgressAll();
    }
    const ucs_status_t status = ucp_request_check_status(flush);
    ucp_request_free(flush);
    if (status != UCS_OK) return ToStatus(status, "raw get loop flush");
  }
  return absl::Now() - start;
}

absl::Duration MemcpyLoop(const std::vector<std::byte*>& sources,
                          absl::Span<const TransferCopy> copies, std::byte* local) {
  const absl::Time start = absl::Now();
  for (const TransferCopy& c : copies) {
    std::memcpy(local + c.dst_offset, sources[c.src_rank] + c.src_offset,
                static_cast<size_t>(c.length));
  }
  return absl::Now() - start;
}

}  // namespace tandem::bench
