// Finds the file descriptor of a connected TCP socket of this process by its addresses: the HTTP
// server's connection watch needs the socket of a request (http_server.cc), which cpp-httplib 0.11
// does not hand to a handler.
//
// A scan of /proc/self/fd learns every connected socket of the process. A lookup first tries what
// the latest scan learned, checked against the socket's addresses now (so a descriptor closed and
// reused by another connection is never returned for this one), and scans again only on a miss.
// N requests that look up their sockets after a burst of N connections thus cost about one scan
// of the N descriptors, not a scan each: 2 system calls per descriptor, so N² calls for a burst
// (4 million at 2,000 streaming connections, the router capacity bench's step).
//
// Thread-safety: thread-safe; scans are serialised.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace tandem {

class SocketFinder {
 public:
  // The descriptor of the connected socket whose peer is `remote_addr`:`remote_port` (numeric
  // IPv4 or IPv6 text, as inet_ntop writes it) and whose local port is `local_port`; -1 when
  // the process has none.
  int Find(const std::string& remote_addr, int remote_port, int local_port);

  // Scans of /proc/self/fd so far.
  int64_t scans() const;

 private:
  using Key = std::tuple<std::string, int, int>;  // remote address, remote port, local port

  // The socket's key now; false when `fd` is not a connected TCP socket.
  static bool KeyOf(int fd, Key* key);

  mutable absl::Mutex mu_;
  absl::flat_hash_map<Key, int> learned_ ABSL_GUARDED_BY(mu_);  // by the latest scan
  int64_t scans_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tandem
