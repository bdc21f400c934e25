// Keeps a node registered with a router: calls Router.Heartbeat every ttl/3 (each call with a
// deadline) until destroyed. Failures are logged once per transition, never fatal — the router
// may start later than the node.
#pragma once

#include <grpcpp/security/credentials.h>

#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "tandem/v1/common.pb.h"

namespace tandem {

class HeartbeatSender {
 public:
  // `credentials`: of the channel to the router (nullptr: insecure; TLS:
  // serving/tls_credentials.h).
  HeartbeatSender(std::string router, std::string address, v1::InstanceRole role,
                  absl::Duration ttl,
                  std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr);
  ~HeartbeatSender();
  HeartbeatSender(const HeartbeatSender&) = delete;
  HeartbeatSender& operator=(const HeartbeatSender&) = delete;

 private:
  void Loop();
  const std::string router_, address_;
  const v1::InstanceRole role_;
  const absl::Duration ttl_;
  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace tandem
