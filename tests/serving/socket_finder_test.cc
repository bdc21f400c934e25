// SocketFinder (serving/socket_finder.h) over real loopback TCP connections: each accepted socket
// is found by its peer's address and port and the local port; one scan learns them all; a closed
// socket is not returned, and a connection made after the scan is found by a new one.
#include "serving/socket_finder.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

namespace tandem {
namespace {

int PortOf(int fd, bool peer) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  const int rc = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len)
                      : ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return rc == 0 ? ntohs(a.sin_port) : -1;
}

class SocketFinderTest : public testing::Test {
 protected:
  void SetUp() override {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(listener_, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    ASSERT_EQ(::listen(listener_, 16), 0);
    port_ = PortOf(listener_, false);
  }
  void TearDown() override {
    for (int fd : fds_) ::close(fd);
    ::close(listener_);
  }

  struct Connection {
    int client = -1;
    int accepted = -1;
  };
  Connection Connect() {
    Connection c;
    c.client = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port_));
    EXPECT_EQ(::connect(c.client, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    c.accepted = ::accept(listener_, nullptr, nullptr);
    EXPECT_GE(c.accepted, 0);
    fds_.push_back(c.client);
    fds_.push_back(c.accepted);
    return c;
  }
  // The server side's socket of `c`, as the HTTP server looks it up.
  int Find(const Connection& c) {
    return finder_.Find("127.0.0.1", PortOf(c.client, false), port_);
  }

  SocketFinder finder_;
  int listener_ = -1;
  int port_ = 0;
  std::vector<int> fds_;
};

TEST_F(SocketFinderTest, FindsEveryAcceptedSocketWithOneScan) {
  std::vector<Connection> connections;
  for (int i = 0; i < 5; ++i) connections.push_back(Connect());
  for (const Connection& c : connections) EXPECT_EQ(Find(c), c.accepted);
  EXPECT_EQ(finder_.scans(), 1);
}

TEST_F(SocketFinderTest, AConnectionAfterTheScanIsFoundByAnotherScan) {
  const Connection first = Connect();
  EXPECT_EQ(Find(first), first.accepted);
  const Connection second = Connect();
  EXPECT_EQ(Find(second), second.accepted);
  EXPECT_EQ(finder_.scans(), 2);
  EXPECT_EQ(Find(first), first.accepted);  // still learned, still checked
  EXPECT_EQ(finder_.scans(), 2);
}

TEST_F(SocketFinderTest, AClosedSocketOrAnUnknownPeerIsNotFound) {
  const Connection c = Connect();
  const int client_port = PortOf(c.client, false);
  EXPECT_EQ(Find(c), c.accepted);
  ::close(c.accepted);
  fds_.erase(std::find(fds_.begin(), fds_.end(), c.accepted));
  EXPECT_EQ(finder_.Find("127.0.0.1", client_port, port_), -1);
  EXPECT_EQ(finder_.Find("127.0.0.2", 1, port_), -1);
}

}  // namespace
}  // namespace tandem
