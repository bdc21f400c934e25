// RAII owners of a UCX context and a UCX worker (one pair per rank, docs/design.md#pulling-kv).
//
// Ownership: UcxContext owns a ucp_context_h (ucp_cleanup on destruction). UcxWorker owns a
// ucp_worker_h and holds a shared reference to its context, so a context always outlives its
// workers and pools. Neither can be copied or moved (UCX keeps pointers to them).
//
// Thread-safety: workers are created in UCS_THREAD_MODE_SINGLE — exactly one thread may call
// into a worker at a time (the owner serialises). Signal() is the exception: UCX documents
// ucp_worker_signal as safe from any thread, and it is how other threads wake a waiter.
//
// Configuration: UCX reads its UCX_* environment (UCX_TLS, UCX_NET_DEVICES, ...); `config`
// overrides are applied on top, names without the UCX_ prefix (e.g. {"TLS", "tcp"}).
#pragma once

#include <ucp/api/ucp.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tandem {

struct UcxOptions {
  std::vector<std::pair<std::string, std::string>> config;  // e.g. {{"TLS", "tcp"}}
};

class UcxContext {
 public:
  // Features: RMA (one-sided get) and WAKEUP (event fd for blocking progress).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<UcxContext>> Create(
      const UcxOptions& options);
  ~UcxContext();
  UcxContext(const UcxContext&) = delete;
  UcxContext& operator=(const UcxContext&) = delete;

  ucp_context_h get() const { return context_; }

  // Transport resources UCX enabled, as "<transport>/<device>" (e.g. "tcp/lo", "sysv/memory").
  const std::vector<std::string>& resources() const { return resources_; }

  // Whether some enabled transport can report peer failure (UCP_ERR_HANDLING_MODE_PEER). In
  // UCX 1.13.1 self, sysv, posix, cma, knem and xpmem cannot: with only those, an endpoint
  // asking for peer error handling is "unreachable" (docs/kv_transfer.md).
  bool can_detect_peer_failure() const;

  // Memory types UCX can reach with what it loaded (ucp_context_query,
  // UCP_ATTR_FIELD_MEMORY_TYPES): a bitmask over ucs_memory_type_t. Debian's UCX 1.13 reports
  // host only; a CUDA-aware UCX on a machine with a GPU adds cuda (docs/gpu.md#gpu-direct-kv).
  uint64_t memory_types() const { return memory_types_; }
  bool supports_cuda_memory() const;
  // memory_types() as UCX names them, comma-separated ("host,cuda,cuda-managed").
  std::string memory_type_names() const;

 private:
  UcxContext(ucp_context_h context, std::vector<std::string> resources, uint64_t memory_types)
      : context_(context), resources_(std::move(resources)), memory_types_(memory_types) {}
  ucp_context_h context_;
  std::vector<std::string> resources_;
  uint64_t memory_types_;
};

class UcxWorker {
 public:
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<UcxWorker>> Create(
      std::shared_ptr<UcxContext> context);
  ~UcxWorker();
  UcxWorker(const UcxWorker&) = delete;
  UcxWorker& operator=(const UcxWorker&) = delete;

  ucp_worker_h get() const { return worker_; }
  const std::shared_ptr<UcxContext>& context() const { return context_; }

  // The worker's packed address, as bytes a peer passes to ucp_ep_create.
  [[nodiscard]] absl::StatusOr<std::string> PackedAddress() const;

  // Runs ucp_worker_progress until it reports no more events; returns how many it handled.
  unsigned ProgressAll();

  // Blocks until the worker has an event, Signal() is called, or `timeout` passes (whichever
  // comes first). Returns early, without blocking, when events are already pending. Callers
  // must ProgressAll() before and after. Never blocks longer than `timeout`.
  [[nodiscard]] absl::Status WaitForEvent(absl::Duration timeout);

  // Wakes a WaitForEvent in another thread. Safe from any thread.
  void Signal();

 private:
  UcxWorker(std::shared_ptr<UcxContext> context, ucp_worker_h worker, int event_fd)
      : context_(std::move(context)), worker_(worker), event_fd_(event_fd) {}

  std::shared_ptr<UcxContext> context_;
  ucp_worker_h worker_;
  int event_fd_;  // owned by the worker (ucp_worker_get_efd); valid until ucp_worker_destroy
};

}  // namespace tandem
