#include "serving/socket_finder.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <utility>

#include "absl/strings/numbers.h"

namespace tandem {
namespace {

bool AddressOf(const sockaddr_storage& a, std::string* address, int* port) {
  char text[INET6_ADDRSTRLEN] = "";
  if (a.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(a);
    ::inet_ntop(AF_INET, &in.sin_addr, text, sizeof(text));
    *port = ntohs(in.sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(a);
    ::inet_ntop(AF_INET6, &in6.sin6_addr, text, sizeof(text));
    *port = ntohs(in6.sin6_port);
  } else {
    return false;
  }
  *address = text;
  return true;
}

}  // namespace

bool SocketFinder::KeyOf(int fd, Key* key) {
  sockaddr_storage peer{}, local{};
  socklen_t peer_len = sizeof(peer), local_len = sizeof(local);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) return false;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0) return false;
  std::string remote_addr, local_addr;
  int remote_port = -1, local_port = -1;
  if (!AddressOf(peer, &remote_addr, &remote_port) || !AddressOf(local, &local_addr, &local_port)) {
    return false;
  }
  *key = Key(std::move(remote_addr), remote_port, local_port);
  return true;
}

int SocketFinder::Find(const std::string& remote_addr, int remote_port, int local_port) {
  const Key wanted(remote_addr, remote_port, local_port);
  absl::MutexLock lock(&mu_);
  if (const auto it = learned_.find(wanted); it != learned_.end()) {
    Key now;
    if (KeyOf(it->second, &now) && now == wanted) return it->second;
  }
  ++scans_;
  learned_.clear();
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  while (const dirent* entry = ::readdir(dir)) {
    int fd = -1;
    Key key;
    if (absl::SimpleAtoi(entry->d_name, &fd) && KeyOf(fd, &key)) learned_[std::move(key)] = fd;
  }
  ::closedir(dir);
  const auto it = learned_.find(wanted);
  return it != learned_.end() ? it->second : -1;
}

int64_t SocketFinder::scans() const {
  absl::MutexLock lock(&mu_);
  return scans_;
}

}  // namespace tandem
