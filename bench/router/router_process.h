// The router under test as its own process (the real tandem-router binary), optionally pinned to
// CPUs with taskset; its ports come from --port_file/--http_port_file, its CPU time and thread
// count, per-thread context switches and resident memory from /proc. Stopped (SIGTERM, then SIGKILL
// after a bounded wait) on destruction.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::bench {

class RouterProcess {
 public:
  // `cpus`: a taskset CPU list ("0,1"), empty = not pinned. Waits up to 60 s for both ports.
  static absl::StatusOr<std::unique_ptr<RouterProcess>> Start(const std::string& binary,
                                                              std::vector<std::string> args,
                                                              const std::string& cpus);
  ~RouterProcess();

  int grpc_port() const { return grpc_port_; }
  int http_port() const { return http_port_; }
  // User + system CPU seconds so far; -1 when /proc cannot be read.
  double CpuSeconds() const;
  // Threads now (/proc/PID/status); -1 when unknown.
  int Threads() const;
  // Context switches of each thread alive now, by thread id: the times it was switched in
  // (/proc/PID/task/*/schedstat). A thread's count is lost when it exits: sample while it lives.
  std::map<int, int64_t> ThreadSwitches() const;
  // Resident memory now, KiB (VmRSS); -1 when unknown.
  int64_t RssKb() const;

 private:
  RouterProcess() = default;
  pid_t pid_ = -1;
  std::string dir_;
  int grpc_port_ = 0;
  int http_port_ = 0;
};

}  // namespace tandem::bench
