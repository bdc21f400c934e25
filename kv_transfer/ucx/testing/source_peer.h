// Test/benchmark support: a UcxTransferSource running in a separate process ("source peer"), so
// transfers cross a real process boundary the way prefill → decode does.
//
// Protocol (pipes on fixed descriptors, never stdout: UCX prints its warnings there):
//   parent → peer, fd kPeerInFd:  one line, EncodeSourcePeerConfig(config)
//   peer → parent, fd kPeerOutFd: 8-byte little-endian length + SerializeTransferMetadata(...)
//   parent → peer: "exit\n" or EOF → the peer destroys its UcxTransferSource and exits 0.
// The peer fills its pools with kv_pattern.h's pattern before sending the metadata, so the
// parent may read as soon as it has the metadata. Every wait in the parent has a deadline.
//
// SourcePeerProcess owns the child: its destructor SIGKILLs and reaps it if it still runs, so a
// failing test never leaves a peer behind. Thread-compatible.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/kv_pool_memory.h"
#include "kv_transfer/transfer_types.h"

namespace tandem::testing {

inline constexpr int kPeerInFd = 3;
inline constexpr int kPeerOutFd = 4;

struct SourcePeerConfig {
  std::string engine_id = "prefill-test";
  uint64_t epoch = 1;
  uint64_t compat_hash = 0;
  KvLayout layout;
  std::vector<int32_t> blocks;  // the request's virtual block table
  int64_t num_tokens = 0;
};

std::string EncodeSourcePeerConfig(const SourcePeerConfig& config);
[[nodiscard]] absl::StatusOr<SourcePeerConfig> DecodeSourcePeerConfig(absl::string_view line);

// Device pools for a peer serving GPU-direct KV (transfer_bench --memory cuda): `allocate`
// hands out each rank's device pool (registered with UCX as CUDA memory), `upload` copies the
// host-filled pattern into it (dst device, src host, bytes).
struct SourcePeerDevice {
  KvPoolAllocator allocate;
  std::function<absl::Status(void*, const void*, int64_t)> upload;
};

// The peer's side of the protocol; returns the process exit code. `device` set: the pools are
// device memory (the pattern is written on the host and uploaded).
int RunSourcePeer(int in_fd, int out_fd, const SourcePeerDevice* device = nullptr);

class SourcePeerProcess {
 public:
  struct Options {
    std::string executable;                                // runs RunSourcePeer
    std::vector<std::string> args;                         // argv[1..]
    std::vector<std::pair<std::string, std::string>> env;  // added to / replacing ours
    absl::Duration startup_timeout = absl::Seconds(60);    // until metadata arrives
  };

  [[nodiscard]] static absl::StatusOr<std::unique_ptr<SourcePeerProcess>> Spawn(
      const Options& options, const SourcePeerConfig& config);
  ~SourcePeerProcess();
  SourcePeerProcess(const SourcePeerProcess&) = delete;
  SourcePeerProcess& operator=(const SourcePeerProcess&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& serialized_metadata() const { return serialized_metadata_; }
  const TransferMetadata& metadata() const { return metadata_; }

  // kill(pid, sig), e.g. SIGSTOP / SIGCONT. FAILED_PRECONDITION once the peer was reaped.
  [[nodiscard]] absl::Status Signal(int sig);
  // SIGKILL, then reap. Returns when the process is gone.
  void Kill();
  // Asks the peer to exit and waits up to `timeout` for it; SIGKILLs it after that. Returns
  // the raw wait status (WIFEXITED / WEXITSTATUS apply).
  [[nodiscard]] absl::StatusOr<int> Shutdown(absl::Duration timeout);

 private:
  SourcePeerProcess(pid_t pid, int to_peer, int from_peer)
      : pid_(pid), to_peer_(to_peer), from_peer_(from_peer) {}
  int Reap();

  pid_t pid_;
  int to_peer_;
  int from_peer_;
  bool reaped_ = false;
  std::string serialized_metadata_;
  TransferMetadata metadata_;
};

}  // namespace tandem::testing
